from django.db import models


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    DISPATCHED = "dispatched", "Dispatched"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    PREEMPTED = "preempted", "Preempted"
    REQUEUED = "requeued", "Requeued"


class JobPriorityClass(models.TextChoices):
    GUARANTEED = "guaranteed", "Guaranteed (within the team's guarantee, never preempted)"
    OVER_QUOTA = "over_quota", "Over quota (spare capacity, preemptible)"
    PREEMPTIBLE = "preemptible", "Preemptible (scavenger)"


# Waiting for the scheduler: requeued jobs are queued again.
WAITING_STATUSES = (JobStatus.QUEUED, JobStatus.REQUEUED)
# Holding GPUs on a node.
ACTIVE_STATUSES = (JobStatus.DISPATCHED, JobStatus.RUNNING)
# Stopped for good.
FINISHED_STATUSES = (
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
)
# Not finished; a preempted job is waiting to be requeued.
OPEN_STATUSES = (*WAITING_STATUSES, *ACTIVE_STATUSES, JobStatus.PREEMPTED)


class WhatIfStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
