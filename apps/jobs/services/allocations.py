"""A job's GPU allocations: which nodes run its attempt, and closing and releasing them.

Closing an allocation (end = now) stops billing; releasing it (released_at) gives its GPU back
to the scheduler once the node confirmed the process is gone.
"""

from datetime import datetime

from apps.jobs.models import Job, JobAllocation


def job_hostnames(job: Job) -> list[str]:
    """Nodes running the job's current attempt (primary node first)."""
    names = list(
        JobAllocation.objects.filter(job=job, end__isnull=True)
        .values_list("gpu__node__hostname", flat=True)
        .distinct()
    )
    primary = job.node.hostname if job.node_id else None
    return sorted(set(names), key=lambda h: (h != primary, h))


def close_allocations(job: Job, *, now: datetime) -> int:
    """End the job's open allocations at `now`: billing stops there. The GPUs stay out of the
    scheduler's pool until each node confirms the process is gone (`release_allocations`)."""
    return JobAllocation.objects.filter(job=job, end__isnull=True).update(end=now)


def release_allocations(*, job_id: int, attempt: int, hostname: str, now: datetime) -> int:
    """A node reported the attempt's process finished (or never ran there): its GPUs of that
    attempt are free for the scheduler again."""
    return JobAllocation.objects.filter(
        job_id=job_id, attempt=attempt, gpu__node__hostname=hostname, released_at__isnull=True
    ).update(released_at=now)


def release_job_allocations(job: Job, *, now: datetime) -> int:
    """An execution backend confirmed the job's end itself (Slurm, where no node agent
    reports): every GPU the job still holds is free for the scheduler again at `now`."""
    return JobAllocation.objects.filter(job=job, released_at__isnull=True).update(released_at=now)
