"""Reads of the jobs app."""

from datetime import datetime

from django.conf import settings
from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from apps.jobs.choices import WAITING_STATUSES, JobPriorityClass
from apps.jobs.dispatch import attained_gpu_seconds, queued_jobs
from apps.jobs.models import Job, JobAllocation
from apps.jobs.scheduler.config import queue_order_key
from apps.jobs.scheduler.state import PendingReason
from apps.teams.selectors import quota_table
from portal import queries


def job_list(*, user) -> QuerySet[Job]:
    """Jobs of the user's teams (all teams for platform admins and finance)."""
    return (
        Job.objects.for_user(user)
        .select_related("team", "submitted_by", "gpu_model", "node", "reservation")
        .prefetch_related(
            Prefetch(
                "allocations",
                queryset=JobAllocation.objects.select_related("gpu__node").order_by(
                    "-attempt", "gpu__node__hostname", "gpu__index"
                ),
            )
        )
    )


def current_allocations(job: Job) -> list[JobAllocation]:
    """The GPUs of the job's latest attempt."""
    allocations = list(job.allocations.all())
    latest = max((a.attempt for a in allocations), default=None)
    return [a for a in allocations if a.attempt == latest]


def with_figures(jobs) -> list[Job]:
    """The jobs, each with `figures`: what higher apps add through the `jobs.figures` query
    (efficiency, cost so far, estimated cost of a waiting job), {} when nothing answers.
    Subscribers answer for the whole list at once, so a page costs a fixed number of queries."""
    jobs = list(jobs)
    figures = queries.ask_merged("jobs.figures", jobs=jobs)
    for job in jobs:
        job.figures = figures.get(job.pk, {})
    return jobs


# Short names of the scheduler's pending reasons (``PendingReason``) for the queue page; the
# scheduler's own sentence (``Job.pending_message``) says the rest.
PENDING_REASON_LABELS = {
    PendingReason.QUOTA_REACHED: "Team at its quota limit",
    PendingReason.BEYOND_QUOTA: "Larger than the team's quota",
    PendingReason.NO_CAPACITY: "Not enough free GPUs",
    PendingReason.FAIR_SHARE: "Other teams first (fair share)",
    PendingReason.RESERVED: "Free GPUs are booked",
    PendingReason.RESERVATION_NOT_ACTIVE: "Its booking has not started",
    PendingReason.WAITING_FOR_PREEMPTION: "Over-quota work is stopping for it",
    PendingReason.RECLAIMING_GUARANTEE: "Reclaiming the team's guarantee",
    PendingReason.POWERING_UP: "A node is powering up",
    PendingReason.TEAM_JOB_FIRST: "The team's first job first",
    PendingReason.RESTARTS_WITHIN_GUARANTEE: "Restarts within the guarantee",
}
ANY_MODEL_LABEL = "Any model"


def queue_overview(*, user, now: datetime | None = None) -> dict:
    """The live queue as every signed-in user sees it.

    ``models``: per GPU model (jobs that take any model last), the waiting jobs in the
    scheduler's queue order (``queue_order_key`` of the configured policy) with their
    position, the reason and estimated start the last scheduling cycle wrote, and whether the
    viewer may see the job itself (its name and page: jobs of their own teams, every job for
    platform admins and finance, as on the jobs list). ``teams``: per quota row, what each team
    is guaranteed, holds now and borrows above its guarantee (the quota rule's figures)."""
    now = now or timezone.now()
    order = queue_order_key(settings.JOBS_SCHEDULER_POLICY)
    waiting = list(
        Job.objects.filter(status__in=WAITING_STATUSES).select_related("team", "gpu_model")
    )
    visible = set(
        Job.objects.for_user(user)
        .filter(pk__in=[job.pk for job in waiting])
        .values_list("pk", flat=True)
    )
    by_model: dict[str, list[Job]] = {}
    for job in waiting:
        by_model.setdefault(job.gpu_model.name if job.gpu_model_id else "", []).append(job)
    models = []
    attained = attained_gpu_seconds()  # a requeued job that ran for hours waits behind fresh ones
    keys = {queued.job_id: order(queued) for queued in queued_jobs(waiting, attained=attained)}
    for name in sorted(by_model, key=lambda n: (n == "", n)):
        jobs = sorted(by_model[name], key=lambda job: keys[job.pk])
        models.append(
            {
                "gpu_model": name or ANY_MODEL_LABEL,
                "jobs": [
                    {
                        "position": position,
                        "job": job,
                        "visible": job.pk in visible,
                        "priority_class": JobPriorityClass(job.priority_class).label.split(" (")[0],
                        "reason": PENDING_REASON_LABELS.get(job.pending_reason, ""),
                        "message": job.pending_message if job.pk in visible else "",
                        "waiting_seconds": max(0, int((now - job.submitted_at).total_seconds())),
                    }
                    for position, job in enumerate(jobs, start=1)
                ],
            }
        )
    teams = sorted(
        quota_table(now=now),
        key=lambda row: (row["team"].slug, row["gpu_model"] is None, str(row["gpu_model"] or "")),
    )
    return {"now": now, "models": models, "teams": teams}
