"""Reads of telemetry: downsampled series per GPU, idle GPU-hours, and the (hour, team, GPU
model) sums that dashboards and efficiency pages aggregate."""

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import Max, Q, QuerySet, Sum
from django.utils import timezone

from apps.telemetry.activity import activity_of, signal_of_average
from apps.telemetry.choices import IdleKind
from apps.telemetry.models import (
    GpuHourRollup,
    GpuMinuteRollup,
    GpuSample,
    IdleHourRollup,
    IdleInterval,
    TeamModelHourRollup,
)

MAX_POINTS = 2000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _bucket(moment: datetime, step: timedelta) -> datetime:
    return EPOCH + ((moment - EPOCH) // step) * step


def gpu_series(*, gpu_id: int, start: datetime, end: datetime, step: timedelta) -> list[dict]:
    """Utilization, SM activity (GPM; None on GPUs without it), memory and power of one GPU
    over [start, end) in buckets of `step`, from the coarsest source that still resolves the
    step (hour rollups, minute rollups, raw samples). Caller caps (end - start) / step at
    MAX_POINTS."""
    if step >= timedelta(minutes=1):
        rollup = GpuHourRollup if step >= timedelta(hours=1) else GpuMinuteRollup
        values = rollup.objects.filter(
            gpu_id=gpu_id, bucket__gte=start, bucket__lt=end
        ).values_list(
            "bucket",
            "util_avg",
            "util_max",
            "mem_used_avg_mib",
            "power_avg_w",
            "sm_active_avg",
            "samples",
        )
    else:
        rows = GpuSample.objects.filter(gpu_id=gpu_id, ts__gte=start, ts__lt=end)
        values = [
            (ts, util, util, mem, power, sm, 1)
            for ts, util, mem, power, sm in rows.values_list(
                "ts", "util_gpu", "mem_used_mib", "power_w", "sm_active"
            )
        ]
    buckets: dict[datetime, list] = defaultdict(list)
    for moment, *fields in values:
        buckets[_bucket(moment, step)].append(fields)
    series = []
    for moment in sorted(buckets):
        items = buckets[moment]
        series.append(
            {
                "t": moment,
                "util_avg": _mean([(i[0], i[5]) for i in items]),
                "util_max": max((i[1] for i in items if i[1] is not None), default=None),
                "mem_used_mib": _mean([(i[2], i[5]) for i in items]),
                "power_w": _mean([(i[3], i[5]) for i in items]),
                "sm_active": _mean([(i[4], i[5]) for i in items]),
            }
        )
    return series


def _mean(pairs) -> float | None:
    pairs = [(v, w) for v, w in pairs if v is not None]
    weight = sum(w for _, w in pairs)
    return round(sum(v * w for v, w in pairs) / weight, 2) if weight else None


def idle_intervals(*, start: datetime, end: datetime) -> QuerySet[IdleInterval]:
    return IdleInterval.objects.filter(start__lt=end, end__gt=start).select_related(
        "team", "gpu__model", "gpu__node"
    )


def idle_summary(*, start: datetime, end: datetime, teams=None) -> dict:
    """Idle GPU-hours over [start, end) by kind, team and GPU model (intervals clipped to the
    window), and the GPUs idle right now. With `teams`, held-idle time of those teams only
    (unallocated capacity belongs to no team and is always shown)."""
    visible = Q() if teams is None else Q(team__in=teams) | Q(kind=IdleKind.UNALLOCATED)
    totals: dict[tuple[str, str, str], float] = defaultdict(float)
    intervals = idle_intervals(start=start, end=end).filter(visible)
    for interval in intervals:
        hours = (min(interval.end, end) - max(interval.start, start)).total_seconds() / 3600
        team = interval.team.slug if interval.team else ""
        totals[(interval.kind, team, interval.gpu.model.name)] += hours
    now = timezone.now()
    current = IdleInterval.objects.filter(visible, end__gte=now - timedelta(minutes=2))
    return {
        "window": {"start": start, "end": end},
        "gpu_hours": [
            {"kind": kind, "team": team or None, "gpu_model": model, "gpu_hours": round(h, 4)}
            for (kind, team, model), h in sorted(totals.items())
        ],
        "now": {
            kind.value: list(
                current.filter(kind=kind).values_list("gpu__uuid", flat=True).order_by("gpu__uuid")
            )
            for kind in IdleKind
        },
    }


# --- (hour, team, GPU model) sums ----------------------------------------------------------

# metric -> the TeamModelHourRollup columns holding its sum and count
TEAM_MODEL_AVERAGES = {
    "util_avg": ("util_sum", "util_n"),
    "mem_used_avg_mib": ("mem_used_sum_mib", "mem_used_n"),
    "sm_active_avg": ("sm_active_sum", "sm_active_n"),
    "sm_occupancy_avg": ("sm_occupancy_sum", "sm_occupancy_n"),
    "tensor_active_avg": ("tensor_active_sum", "tensor_active_n"),
    "dram_bw_avg": ("dram_bw_sum", "dram_bw_n"),
}


def team_model_hours(
    *,
    start: datetime,
    end: datetime,
    team_ids: Iterable[int] | None = None,
    unallocated: bool = False,
    gpu_model_id: int | None = None,
) -> QuerySet[TeamModelHourRollup]:
    """The pre-summed hour rows (one per hour, team and GPU model) of the hours starting in
    [start, end): of `team_ids` (None: every team), plus the unallocated GPUs' rows (team
    null) with `unallocated`. Aggregate them further with Sum over any of their columns."""
    rows = TeamModelHourRollup.objects.filter(bucket__gte=start, bucket__lt=end)
    scope = Q(team__isnull=False) if team_ids is None else Q(team_id__in=list(team_ids))
    if unallocated:
        scope |= Q(team__isnull=True)
    rows = rows.filter(scope)
    if gpu_model_id is not None:
        rows = rows.filter(gpu_model_id=gpu_model_id)
    return rows


def team_model_totals(
    *,
    start: datetime,
    end: datetime,
    team_ids: Iterable[int] | None = None,
    unallocated: bool = False,
    gpu_model_id: int | None = None,
) -> list[dict]:
    """Totals per (team, GPU model) over the hours starting in [start, end), summed in SQL.

    One dict per pair, ordered by team id (unallocated last) then model id:
    team_id (None: unallocated), gpu_model_id, gpu_hours (hour rollup rows: GPU-hours with
    telemetry), busy_gpu_hours, energy_kwh (None without a counter), util_avg,
    mem_used_avg_mib, mem_used_max_mib, sm_active_avg, sm_occupancy_avg, tensor_active_avg,
    dram_bw_avg (averages over the GPU-hours that had a value; None if none had), signal
    ("sm_active" where the GPUs reported GPM metrics, else "util") and activity_avg (the
    average of that signal, percent)."""
    sums = {column: Sum(column) for pair in TEAM_MODEL_AVERAGES.values() for column in pair}
    rows = (
        team_model_hours(
            start=start,
            end=end,
            team_ids=team_ids,
            unallocated=unallocated,
            gpu_model_id=gpu_model_id,
        )
        .values("team_id", "gpu_model_id")
        .annotate(
            hours=Sum("gpu_hours"),
            busy=Sum("busy_seconds"),
            energy=Sum("energy_j"),
            mem_max=Max("mem_used_max_mib"),
            **sums,
        )
        .order_by()
    )
    result = []
    for row in rows:
        averages = {
            name: row[total] / row[count] if row[count] else None
            for name, (total, count) in TEAM_MODEL_AVERAGES.items()
        }
        activity, _ = activity_of(
            sm_active_avg=averages["sm_active_avg"], util_avg=averages["util_avg"]
        )
        result.append(
            {
                "team_id": row["team_id"],
                "gpu_model_id": row["gpu_model_id"],
                "gpu_hours": row["hours"],
                "busy_gpu_hours": (row["busy"] or 0.0) / 3600,
                "energy_kwh": row["energy"] / 3.6e6 if row["energy"] is not None else None,
                **averages,
                "mem_used_max_mib": row["mem_max"],
                "signal": signal_of_average(averages["sm_active_avg"]),
                "activity_avg": activity,
            }
        )
    result.sort(key=lambda r: (r["team_id"] is None, r["team_id"] or 0, r["gpu_model_id"]))
    return result


# --- idle GPU-hours per step, summed in SQL --------------------------------------------------

# Microseconds, summed exactly (with the hourly sums, `idle_hours_by_step`). The steps come as
# an array: the planner knows how many (generate_series is guessed at 1,000 rows, which made a
# one-step read of a few thousand intervals look big enough to JIT-compile, ~0.4 s).
IDLE_BY_STEP_SQL = """
SELECT s.t, i.kind, i.team_id, g.model_id,
       sum((extract(epoch FROM least(i."end", s.t + %(step)s, %(end)s)
                               - greatest(i.start, s.t, %(start)s)) * 1000000)::bigint)
FROM unnest(%(times)s::timestamptz[]) AS s(t)
JOIN telemetry_idleinterval i
  ON i.start < least(s.t + %(step)s, %(end)s) AND i."end" > greatest(s.t, %(start)s)
JOIN fleet_gpu g ON g.id = i.gpu_id
WHERE i.start < %(end)s AND i."end" > %(start)s AND ({scope}) {model}
GROUP BY s.t, i.kind, i.team_id, g.model_id
"""


# The hourly sums of the hours in [start, end), summed per step (steps of whole hours from
# `origin`).
IDLE_HOURS_BY_STEP_SQL = """
SELECT date_bin(%(step)s, r.bucket, %(origin)s), r.kind, r.team_id, r.gpu_model_id, sum(r.idle_us)
FROM telemetry_idlehourrollup r
WHERE r.bucket >= %(start)s AND r.bucket < %(end)s AND ({scope}) {model}
GROUP BY 1, 2, 3, 4
"""

HOUR = timedelta(hours=1)
MICROSECOND = timedelta(microseconds=1)


def idle_hours_by_step(
    *,
    start: datetime,
    end: datetime,
    times: list[datetime],
    step: timedelta,
    team_ids: Iterable[int],
    unallocated: bool = False,
    gpu_model_id: int | None = None,
    portable: bool | None = None,
    presummed: bool | None = None,
) -> list[tuple[datetime, str, int | None, int, float]]:
    """Idle GPU-hours of the intervals overlapping [start, end), clipped to it and split at
    the steps `times` (each `step` long, covering the window), as rows
    (step start, kind, team id or None, GPU model id, GPU-hours). Of `team_ids`' intervals,
    plus unallocated ones with `unallocated`.

    When the steps are whole UTC hours (`presummed`; None: whenever they are), the whole hours
    of the window are read from the hourly sums (IdleHourRollup) and only its part hours at
    either end from the intervals; a month of 10,000 GPUs' intervals clipped to the steps took
    about 1.9 s. Other steps (a day in a zone that is not a whole number of hours off UTC) read
    the intervals. Times are summed in microseconds, so both give the same hours.
    PostgreSQL sums in SQL; other databases (the SQLite demo) in Python, which the tests hold
    to the same numbers."""
    team_ids = list(team_ids)
    if not times:
        return []
    if portable is None:
        portable = connection.vendor != "postgresql"
    whole_from, whole_to = -(-(start - EPOCH) // HOUR) * HOUR + EPOCH, _bucket(end, HOUR)
    if presummed is None:
        presummed = (
            not step % HOUR and _bucket(times[0], HOUR) == times[0] and whole_from < whole_to
        )
    scope = (team_ids, unallocated, gpu_model_id)
    sums: dict[tuple, int] = defaultdict(int)
    if presummed:
        pieces = [(start, whole_from), (whole_to, end)]
        hourly = _hourly_by_step_portable if portable else _hourly_by_step
        for key, us in hourly(whole_from, whole_to, times[0], step, *scope):
            sums[key] += us
    else:
        pieces = [(start, end)]
    clipped = _idle_by_step_portable if portable else _idle_by_step
    for s, e in pieces:
        if s < e:
            first = times[0] + step * ((s - times[0]) // step)
            last = times[0] + step * ((e - MICROSECOND - times[0]) // step)
            for key, us in clipped(s, e, first, last, step, *scope):
                sums[key] += us
    return [(*key, us / 3.6e9) for key, us in sums.items()]


def _idle_by_step(start, end, first, last, step, team_ids, unallocated, gpu_model_id):
    scope = "i.team_id = ANY(%(team_ids)s)" + (" OR i.team_id IS NULL" if unallocated else "")
    model = "AND g.model_id = %(model)s" if gpu_model_id is not None else ""
    times = []
    while first <= last:
        times.append(first)
        first += step
    params = {
        "start": start,
        "end": end,
        "times": times,
        "step": step,
        "team_ids": team_ids,
        "model": gpu_model_id,
    }
    with connection.cursor() as cursor:
        cursor.execute(IDLE_BY_STEP_SQL.format(scope=scope, model=model), params)
        return [((t, kind, team, model_id), int(us)) for t, kind, team, model_id, us in cursor]


def _idle_by_step_portable(start, end, first, last, step, team_ids, unallocated, gpu_model_id):
    scope = Q(team_id__in=team_ids)
    if unallocated:
        scope |= Q(team__isnull=True)
    rows = IdleInterval.objects.filter(scope, start__lt=end, end__gt=start)
    if gpu_model_id is not None:
        rows = rows.filter(gpu__model_id=gpu_model_id)
    sums: dict[tuple, int] = defaultdict(int)
    for kind, team_id, model_id, s, e in rows.values_list(
        "kind", "team_id", "gpu__model_id", "start", "end"
    ):
        s, e = max(s, start), min(e, end)
        t = first + step * ((s - first) // step)
        while t < e and t <= last:
            piece = min(e, t + step) - max(s, t)
            if piece > timedelta(0):
                sums[(t, kind, team_id, model_id)] += piece // MICROSECOND
            t += step
    return sums.items()


def _hourly_by_step(start, end, origin, step, team_ids, unallocated, gpu_model_id):
    scope = "r.team_id = ANY(%(team_ids)s)" + (" OR r.team_id IS NULL" if unallocated else "")
    model = "AND r.gpu_model_id = %(model)s" if gpu_model_id is not None else ""
    params = {
        "start": start,
        "end": end,
        "origin": origin,
        "step": step,
        "team_ids": team_ids,
        "model": gpu_model_id,
    }
    with connection.cursor() as cursor:
        cursor.execute(IDLE_HOURS_BY_STEP_SQL.format(scope=scope, model=model), params)
        return [((t, kind, team, model_id), int(us)) for t, kind, team, model_id, us in cursor]


def _hourly_by_step_portable(start, end, origin, step, team_ids, unallocated, gpu_model_id):
    scope = Q(team_id__in=team_ids)
    if unallocated:
        scope |= Q(team__isnull=True)
    rows = IdleHourRollup.objects.filter(scope, bucket__gte=start, bucket__lt=end)
    if gpu_model_id is not None:
        rows = rows.filter(gpu_model_id=gpu_model_id)
    sums: dict[tuple, int] = defaultdict(int)
    for bucket, kind, team_id, model_id, us in rows.values_list(
        "bucket", "kind", "team_id", "gpu_model_id", "idle_us"
    ):
        sums[(origin + step * ((bucket - origin) // step), kind, team_id, model_id)] += us
    return sums.items()
