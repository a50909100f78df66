"""Business rules of GPU jobs: submit, cancel, agent reports, requeue and preemption.

Every way a job stops closes its open `JobAllocation` rows (end = now): the billing meter charges
job GPU time from [start, end) of allocations, so a requeued or preempted attempt is never billed
twice. Agents are reached through `apps.jobs.messaging` after the transaction commits.

One module per operation; callers import from here (`from apps.jobs import services`).
"""

from apps.jobs.choices import WAITING_STATUSES
from apps.jobs.services.allocations import (
    close_allocations,
    release_allocations,
    release_job_allocations,
)
from apps.jobs.services.reports import job_report
from apps.jobs.services.requeue import (
    jobs_expire_stale,
    jobs_kill_stale_attempts,
    jobs_requeue_for_node,
)
from apps.jobs.services.stop import job_cancel, job_preempt
from apps.jobs.services.submit import fleet_size, job_submit

__all__ = [
    "WAITING_STATUSES",
    "close_allocations",
    "fleet_size",
    "job_cancel",
    "job_preempt",
    "job_report",
    "job_submit",
    "jobs_expire_stale",
    "jobs_kill_stale_attempts",
    "jobs_requeue_for_node",
    "release_allocations",
    "release_job_allocations",
]
