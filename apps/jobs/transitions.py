"""Which status changes a job allows, in one table, and the one function every change goes
through: it refuses a move the table does not list and sets the fields that go with the new
status, so the portal's own lifecycle (dispatch, agent reports, requeue, preemption, cancel)
and an execution backend's (Slurm) keep the same rules."""

from datetime import datetime

from apps.jobs.choices import FINISHED_STATUSES, WAITING_STATUSES, JobStatus
from apps.jobs.models import Job
from portal.exceptions import ConflictError

_FINISHED = frozenset(FINISHED_STATUSES)

# A waiting job is dispatched by the portal's scheduler, or started directly by an execution
# backend that schedules itself (Slurm). It may be cancelled, and a backend may report its end
# before the portal saw it start (it ran between two polls, or never ran).
_FROM_WAITING = frozenset({JobStatus.DISPATCHED, JobStatus.RUNNING, *_FINISHED})

# status: the statuses it may move to
JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    JobStatus.QUEUED: _FROM_WAITING,
    JobStatus.REQUEUED: _FROM_WAITING,
    JobStatus.DISPATCHED: frozenset(
        {JobStatus.RUNNING, JobStatus.PREEMPTED, JobStatus.REQUEUED, *_FINISHED}
    ),
    JobStatus.RUNNING: frozenset({JobStatus.PREEMPTED, JobStatus.REQUEUED, *_FINISHED}),
    # Requeued once its processes are gone; failed if it may not be requeued again or is never
    # heard from; a backend may report how it ended.
    JobStatus.PREEMPTED: frozenset({JobStatus.REQUEUED, *_FINISHED}),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}

# A job is created queued (submitted), or finished when it records a job that ran outside the
# portal's lifecycle (imported from Slurm accounting, demo history).
INITIAL_STATUSES = frozenset({JobStatus.QUEUED, *_FINISHED})


class IllegalJobTransition(ConflictError):
    """A status change the lifecycle table does not allow."""

    code = "illegal_job_transition"

    def __init__(self, job: Job, to: str) -> None:
        super().__init__(
            f"Job #{job.pk} cannot go from {job.status} to {to}.",
            detail={"job": job.pk, "from": job.status, "to": to},
        )


def job_transition_allowed(current: str, to: str) -> bool:
    """Whether the table lets a job in `current` move to `to`."""
    return to in JOB_TRANSITIONS.get(current, frozenset())


def initial_job_status(status: str) -> str:
    """The status a new job is created with, checked against INITIAL_STATUSES (ValueError
    otherwise: a job cannot be born dispatched, running or half-stopped)."""
    if status not in INITIAL_STATUSES:
        raise ValueError(f"A job cannot be created {status}.")
    return status


def job_transition(job: Job, to: str, *, at: datetime, message: str | None = None) -> list[str]:
    """Move `job` to status `to` at `at`, or raise IllegalJobTransition. Sets what the new
    status implies: dispatched: dispatched_at (started_at cleared); running: started_at, and
    dispatched_at when no dispatch preceded it (a backend that starts jobs itself); preempted:
    no finished_at; requeued: node, dispatch and start times and exit code cleared for the next
    attempt; finished: finished_at. Every move clears the pending reason, the estimated start
    and the reclaim clock (they belong to one wait, and a requeued job gets new ones at the
    next cycle); leaving the queue
    for a node also clears the pending message. `message`, when given, becomes the pending
    message. Does not save: returns the changed fields, for the caller's `update_fields`."""
    if not job_transition_allowed(job.status, to):
        raise IllegalJobTransition(job, to)
    fields = ["status", "pending_reason", "estimated_start", "reclaim_since"]
    if to == JobStatus.DISPATCHED:
        job.dispatched_at, job.started_at = at, None
        fields += ["dispatched_at", "started_at"]
    elif to == JobStatus.RUNNING:
        job.started_at = at
        job.dispatched_at = job.dispatched_at or at
        fields += ["started_at", "dispatched_at"]
    elif to == JobStatus.PREEMPTED:
        job.finished_at = None
        fields.append("finished_at")
    elif to == JobStatus.REQUEUED:
        job.node = None
        job.dispatched_at = job.started_at = None
        job.exit_code = None
        fields += ["node", "dispatched_at", "started_at", "exit_code"]
    else:
        job.finished_at = at
        fields.append("finished_at")
    if job.status in WAITING_STATUSES and to in (JobStatus.DISPATCHED, JobStatus.RUNNING):
        job.pending_message = ""
    job.status = to
    job.pending_reason = ""
    job.estimated_start = None
    job.reclaim_since = None
    if message is not None:
        job.pending_message = message
    if "pending_message" not in fields:
        fields.append("pending_message")
    return fields
