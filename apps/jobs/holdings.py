"""Who holds GPU g over [s, e): bookings (`apps.reservations.holdings`) and job allocations.

A job holds a GPU through its allocation rows (`JobAllocation`) over [start, end), half-open
like a booking's holding; a running allocation has no end yet and holds from its start on.
A job inside a booking runs on GPUs the booking already holds, so readers that count or
charge GPUs take only the jobs outside bookings (``outside_bookings``). For the future, a
running job outside a booking is taken to hold its GPUs until its maximum runtime ends
(`job_busy_intervals`), which is what booking availability and the quota rule count.
"""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from apps.fleet.models import GpuModel
from apps.jobs.choices import ACTIVE_STATUSES, JobStatus
from apps.jobs.models import JobAllocation
from apps.reservations.holdings import at_q, bookings_holding, overlap_q
from apps.teams.models import Team
from apps.teams.quota_rule import job_held_until
from portal.raw_rows import fetch_rows


def allocations_holding(
    start: datetime,
    end: datetime | None = None,
    *,
    gpu_ids=None,
    outside_bookings: bool = False,
) -> QuerySet[JobAllocation]:
    """Job allocations of the GPUs (all GPUs if None) over [start, end), running ones
    included; from ``start`` on when ``end`` is None. ``outside_bookings``: only jobs that do
    not run inside a booking."""
    rows = JobAllocation.objects.filter(overlap_q(start, end, open_end=True))
    return _narrowed(rows, gpu_ids=gpu_ids, outside_bookings=outside_bookings)


def allocations_holding_at(
    moment: datetime, *, gpu_ids=None, outside_bookings: bool = False
) -> QuerySet[JobAllocation]:
    """Job allocations of the GPUs (all GPUs if None) at the instant ``moment``."""
    rows = JobAllocation.objects.filter(at_q(moment, open_end=True))
    return _narrowed(rows, gpu_ids=gpu_ids, outside_bookings=outside_bookings)


def _narrowed(rows, *, gpu_ids, outside_bookings: bool):
    if gpu_ids is not None:
        rows = rows.filter(gpu_id__in=gpu_ids)
    if outside_bookings:
        rows = rows.filter(job__reservation__isnull=True)
    return rows


@dataclass(frozen=True)
class Holder:
    """One booking holding or job allocation of a GPU; ``end`` None: a job still running."""

    kind: str  # "booking" or "job"
    id: int  # the booking's or the job's
    gpu_id: int
    team_id: int
    start: datetime
    end: datetime | None


def holders(start: datetime, end: datetime, *, gpu_ids=None) -> list[Holder]:
    """Every booking and job that holds the GPUs (all GPUs if None) over [start, end), jobs
    inside bookings included, bookings first, each by start."""
    bookings = bookings_holding(start, end, gpu_ids=gpu_ids).order_by("start", "pk")
    jobs = allocations_holding(start, end, gpu_ids=gpu_ids).order_by("start", "pk")
    return [
        *(
            Holder("booking", reservation_id, gpu_id, team_id, s, e)
            for reservation_id, gpu_id, team_id, s, e in bookings.values_list(
                "reservation_id", "gpu_id", "reservation__team_id", "start", "end"
            )
        ),
        *(
            Holder("job", job_id, gpu_id, team_id, s, e)
            for job_id, gpu_id, team_id, s, e in jobs.values_list(
                "job_id", "gpu_id", "job__team_id", "start", "end"
            )
        ),
    ]


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
    that outran it, until the kill's grace period ends), overlapping [start, end). Answers the
    `gpus.busy_intervals` query of booking availability."""
    rows = _running_outside_bookings(start, end, gpu_ids=gpu_ids)
    if gpu_model is not None:
        rows = rows.filter(gpu__model=gpu_model)
    if team is not None:
        rows = rows.filter(job__team=team)
    return [(gpu_id, s, e) for (gpu_id,), s, e in _held_spans(rows, start, ("gpu_id",))]


def teams_job_intervals(
    *, start: datetime, end: datetime, teams
) -> list[tuple[int, str, int, int]]:
    """(team_id, gpu_model_name, start_s, end_s) for GPUs held by the `teams`' running jobs
    outside reservations over [start, end), held as `job_busy_intervals` holds them: in one
    query for all the teams. Answers the `teams.busy_intervals` query of quota tables."""
    rows = _running_outside_bookings(start, end).filter(job__team__in=teams)
    return [
        (team_id, model, s, e)
        for (team_id, model), s, e in _held_spans(rows, start, ("job__team_id", "gpu__model__name"))
    ]


# Booking admission's read of running jobs as raw SQL (the ORM's query cost more CPU to build
# than the rest of admission's reads): `_running_outside_bookings` over [start, end) for the
# team's jobs and the model's GPUs. Parameters: the end, the statuses, the team's id, the model's.
_BOOKING_JOBS_SQL = """
    SELECT a.gpu_id, j.team_id, m.name, a.start, j.started_at, j.max_runtime_seconds
    FROM jobs_joballocation a JOIN jobs_job j ON j.id = a.job_id
    JOIN fleet_gpu g ON g.id = a.gpu_id JOIN fleet_gpumodel m ON m.id = g.model_id
    WHERE a."end" IS NULL AND a.start < %s AND j.reservation_id IS NULL
      AND j.status IN ({statuses}) AND (j.team_id = %s OR g.model_id = %s)
"""
_HOLDING_STATUSES = (*ACTIVE_STATUSES, JobStatus.PREEMPTED)


def booking_job_intervals(
    *, start: datetime, end: datetime, team: Team, gpu_model: GpuModel
) -> list[tuple[int, int, str, int, int]]:
    """(gpu_id, team_id, gpu_model_name, start_s, end_s) for GPUs held by running jobs outside
    reservations over [start, end), held as `job_busy_intervals` holds them, that are `team`'s
    (any model: its quota counts them) or on `gpu_model` (any team's: a booking cannot take
    them), in one query. Answers the `booking.busy_intervals` query of booking admission."""
    sql = _BOOKING_JOBS_SQL.format(statuses=", ".join(["%s"] * len(_HOLDING_STATUSES)))
    params = [
        connection.ops.adapt_datetimefield_value(end),
        *(str(status) for status in _HOLDING_STATUSES),
        team.pk,
        gpu_model.pk,
    ]
    rows = fetch_rows(sql, params, datetime_columns=(3, 4))
    return [
        (gpu_id, team_id, model, s, e)
        for (gpu_id, team_id, model), s, e in _spans(rows, start, keys=3)
    ]


def _running_outside_bookings(start: datetime, end: datetime, *, gpu_ids=None):
    return allocations_holding(start, end, gpu_ids=gpu_ids, outside_bookings=True).filter(
        end__isnull=True, job__status__in=(*ACTIVE_STATUSES, JobStatus.PREEMPTED)
    )


def _held_spans(rows, start: datetime, fields: tuple[str, ...]):
    """(the ``fields`` of each allocation, start_s, end_s): from the allocation's start until
    the job gives the GPU back (``job_held_until``); those that end by ``start`` are left out."""
    values = rows.values_list(*fields, "start", "job__started_at", "job__max_runtime_seconds")
    return _spans(values, start, keys=len(fields))


def _spans(rows, start: datetime, *, keys: int):
    """`_held_spans` over rows already read: (the first ``keys`` values, the allocation's start,
    the job's start, its maximum runtime)."""
    now = timezone.now()
    grace = timedelta(seconds=settings.JOBS_KILL_GRACE_SECONDS)
    spans = []
    for row in rows:
        alloc_start, job_start, runtime = row[keys:]
        until = job_held_until((job_start or alloc_start) + timedelta(seconds=runtime), now, grace)
        if until <= start:
            continue
        spans.append(
            (tuple(row[:keys]), math.floor(alloc_start.timestamp()), math.ceil(until.timestamp()))
        )
    return spans
