"""Reads of the jobs app."""

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from apps.fleet.models import GpuModel
from apps.jobs.choices import ACTIVE_STATUSES, JobStatus
from apps.jobs.models import Job, JobAllocation
from apps.teams.models import Team
from apps.teams.quota_rule import job_held_until
from portal import hooks


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


def job_busy_intervals(
    *,
    start: datetime,
    end: datetime,
    gpu_ids=None,
    gpu_model: GpuModel | None = None,
    team: Team | None = None,
) -> list[tuple[int, int, int]]:
    """(gpu_id, start_s, end_s) for GPUs held by running jobs outside reservations (of `team`
    if given), from the allocation's start until the job's maximum runtime ends (or, for a job
    that outran it, until the kill's grace period ends), overlapping [start, end)."""
    rows = JobAllocation.objects.filter(
        end__isnull=True,
        job__reservation__isnull=True,
        job__status__in=(*ACTIVE_STATUSES, JobStatus.PREEMPTED),
        start__lt=end,
    )
    if gpu_ids is not None:
        rows = rows.filter(gpu_id__in=gpu_ids)
    if gpu_model is not None:
        rows = rows.filter(gpu__model=gpu_model)
    if team is not None:
        rows = rows.filter(job__team=team)
    result = []
    now = timezone.now()
    grace = timedelta(seconds=settings.JOBS_KILL_GRACE_SECONDS)
    for gpu_id, alloc_start, job_start, runtime in rows.values_list(
        "gpu_id", "start", "job__started_at", "job__max_runtime_seconds"
    ):
        until = job_held_until((job_start or alloc_start) + timedelta(seconds=runtime), now, grace)
        if until <= start:
            continue
        result.append((gpu_id, math.floor(alloc_start.timestamp()), math.ceil(until.timestamp())))
    return result


def with_figures(jobs) -> list[Job]:
    """The jobs, each with `figures`: what higher apps add through the `jobs.figures` hook
    (efficiency, cost so far, estimated cost of a waiting job), {} when nothing answers.
    Subscribers answer for the whole list at once, so a page costs a fixed number of queries."""
    jobs = list(jobs)
    figures = hooks.emit_merged("jobs.figures", jobs=jobs)
    for job in jobs:
        job.figures = figures.get(job.pk, {})
    return jobs
