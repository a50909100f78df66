"""Allocated and busy GPUs over time: allocation from bookings and jobs (as the chargeback
counts them), busy from the rollups."""

from collections import defaultdict
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, DateTimeField, Func, Q, Sum, Value

from apps.billing.energy import powered_off_spans
from apps.dashboards.selectors.filters import (
    UNALLOCATED,
    Filters,
    floor_to_step,
    rollup_rows,
    step_for,
)
from apps.fleet.choices import GpuStatus
from apps.fleet.models import Gpu, GpuModel
from apps.jobs.holdings import allocations_holding
from apps.reservations.holdings import bookings_holding
from apps.telemetry.selectors import team_model_hours


def _uses(filters: Filters, *, all_teams: bool) -> list[tuple]:
    """What the chargeback charges as allocated, within the window, as
    (start, end, team_id, GPUs, of which in the fleet): active booking holdings, and job
    allocations outside bookings (a job inside a booking runs on GPUs the booking holds).
    Grouped in SQL by interval and team: the GPUs of one booking or job share them, so a month
    of a large fleet is a few hundred rows. Holdings never overlap on a GPU (a database
    constraint) and the scheduler places jobs outside bookings on GPUs no booking holds, so the
    counts add up."""
    in_fleet = Q(gpu__mig_parent__isnull=True) & ~Q(gpu__status=GpuStatus.RETIRED)
    holdings = bookings_holding(filters.start, filters.end)
    if not all_teams:
        holdings = holdings.filter(reservation__team_id__in=filters.team_ids)
    if filters.gpu_model:
        holdings = holdings.filter(gpu__model=filters.gpu_model)
    rows = list(
        holdings.values_list("start", "end", "reservation__team_id")
        .annotate(n=Count("id"), fleet_n=Count("id", filter=in_fleet))
        .order_by()
    )
    jobs = allocations_holding(filters.start, filters.end, outside_bookings=True)
    if not all_teams:
        jobs = jobs.filter(job__team_id__in=filters.team_ids)
    if filters.gpu_model:
        jobs = jobs.filter(gpu__model=filters.gpu_model)
    for start, end, team_id, n, fleet_n in (
        jobs.values_list("start", "end", "job__team_id")
        .annotate(n=Count("id"), fleet_n=Count("id", filter=in_fleet))
        .order_by()
    ):
        rows.append((start, end or filters.end, team_id, n, fleet_n))
    clipped = []
    for start, end, team_id, n, fleet_n in rows:
        start, end = max(start, filters.start), min(end, filters.end)
        if end > start:
            clipped.append((start, end, team_id, n, fleet_n))
    return clipped


def _integrate(events: list[tuple[float, int]], edges: list[float]) -> list[float]:
    """GPU-seconds per step: `events` are (epoch, +n or -n) where n GPUs start or stop being
    counted, `edges` the step boundaries. One sweep over the sorted events."""
    events.sort()
    out = [0.0] * (len(edges) - 1)
    level, last, k = 0, edges[0], 0
    for moment, delta in events:
        while k < len(out) and edges[k + 1] <= moment:
            out[k] += level * (edges[k + 1] - last)
            last = edges[k + 1]
            k += 1
        if k < len(out):
            out[k] += level * (moment - last)
        last = moment
        level += delta
    while k < len(out):
        out[k] += level * (edges[k + 1] - last)
        last = edges[k + 1]
        k += 1
    return out


def _powered_off_unheld(filters: Filters, fleet_ids: set[int]) -> list[tuple[float, int]]:
    """Events (epoch, +1 or -1) of the fleet's GPUs powered down to save energy and held by
    no booking or job, within the window: capacity that is neither allocated nor free, which
    the chargeback charges to no one (`billing.energy.powered_off_spans`, the spans metering
    leaves out). Time a holding overlaps a powered-down span is the holder's already."""
    spans = [
        (gpu_id, start, end)
        for gpu_id, start, end in powered_off_spans(filters.start, filters.end)
        if gpu_id in fleet_ids
    ]
    if not spans:
        return []
    off_ids = {gpu_id for gpu_id, _, _ in spans}
    held: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for holdings in (
        bookings_holding(filters.start, filters.end, gpu_ids=off_ids),
        allocations_holding(filters.start, filters.end, gpu_ids=off_ids, outside_bookings=True),
    ):
        for gpu_id, start, end in holdings.values_list("gpu_id", "start", "end"):
            held[gpu_id].append((start.timestamp(), (end or filters.end).timestamp()))
    events = []
    for gpu_id, start, end in spans:
        cursor = start
        for held_start, held_end in sorted(held[gpu_id]):
            if held_start >= end:
                break
            if held_start > cursor:
                events += ((cursor, 1), (held_start, -1))
            cursor = max(cursor, held_end)
        if cursor < end:
            events += ((cursor, 1), (end, -1))
    return events


def allocated_series(filters: Filters, times: list[datetime], step: timedelta) -> dict:
    """Average GPUs allocated per team over each step, from bookings and jobs (not telemetry),
    so every range and bucket size gives the same answer for the same time: the value of an
    hour is the mean of its minutes. Those who see all teams also get `UNALLOCATED`: the rest
    of the fleet (GPUs neither retired nor MIG slices) less its powered-down GPUs nobody
    holds, as the chargeback counts it: a GPU powered down to save energy is not free
    capacity."""
    if not times:
        return {}
    with_pool = filters.sees_all and not filters.narrowed
    fleet = Gpu.objects.filter(mig_parent__isnull=True).exclude(status=GpuStatus.RETIRED)
    if filters.gpu_model:
        fleet = fleet.filter(model=filters.gpu_model)
    fleet_ids = set(fleet.values_list("id", flat=True))
    fleet_size = len(fleet_ids)
    visible = set(filters.team_ids)
    events: dict[int | None, list] = defaultdict(list)  # team id, or None: the fleet's GPUs
    for start, end, team_id, n, fleet_n in _uses(filters, all_teams=with_pool):
        if team_id in visible:
            events[team_id] += ((start.timestamp(), n), (end.timestamp(), -n))
        if fleet_n:
            events[None] += ((start.timestamp(), fleet_n), (end.timestamp(), -fleet_n))
    edges = [t.timestamp() for t in times] + [(times[-1] + step).timestamp()]
    covered = [(min(t + step, filters.end) - max(t, filters.start)).total_seconds() for t in times]
    slugs = {t.pk: t.slug for t in filters.teams}
    result = {}
    for team_id, team_events in events.items():
        if team_id is None:
            continue
        seconds = _integrate(team_events, edges)
        result[slugs[team_id]] = {t: seconds[i] / covered[i] for i, t in enumerate(times)}
    if with_pool and fleet_size:
        unavailable = events.get(None, []) + _powered_off_unheld(filters, fleet_ids)
        held = _integrate(unavailable, edges)
        result[UNALLOCATED] = {
            t: max(0.0, fleet_size - held[i] / covered[i]) for i, t in enumerate(times)
        }
    return result


class DateBin(Func):
    """PostgreSQL's date_bin(stride, source, origin): the start of the step a time falls in."""

    function = "date_bin"
    output_field = DateTimeField()


def _busy_and_util(filters: Filters, origin: datetime, step: timedelta) -> tuple[list, list]:
    """Busy seconds per (step start, team), and sums and counts of utilization and SM activity
    per (team, GPU model) in the window: ([(t, team_id, busy_seconds)],
    [(team_id, model_id, util_sum, util_n, sm_active_sum, sm_active_n)]).

    Windows over a day read the pre-summed (hour, team, model) rollup; on PostgreSQL both are
    summed in SQL to steps (date_bin), a few thousand rows at most for a month of a large
    fleet. A day reads the minute rollups, summed per (minute, team, model) in SQL; elsewhere
    (SQLite) buckets are merged into steps here."""
    with_pool = filters.sees_all and not filters.narrowed
    if not filters.fine:
        rows = team_model_hours(
            start=filters.start,
            end=filters.end,
            team_ids=filters.team_ids,
            unallocated=with_pool,
            gpu_model_id=filters.gpu_model.pk if filters.gpu_model else None,
        )
        if connection.vendor == "postgresql":
            busy = (
                rows.annotate(t=DateBin(Value(step), "bucket", Value(origin)))
                .values_list("t", "team_id")
                .annotate(busy=Sum("busy_seconds"))
                .order_by()
            )
            util = (
                rows.values_list("team_id", "gpu_model_id")
                .annotate(
                    total=Sum("util_sum"),
                    n=Sum("util_n"),
                    sm_total=Sum("sm_active_sum"),
                    sm_n=Sum("sm_active_n"),
                )
                .order_by()
            )
            return list(busy), list(util)
        grouped = rows.values_list(
            "bucket",
            "team_id",
            "gpu_model_id",
            "busy_seconds",
            "util_sum",
            "util_n",
            "sm_active_sum",
            "sm_active_n",
        )
    else:
        _, rows = rollup_rows(filters)
        scope = Q(team_id__in=filters.team_ids)
        if with_pool:
            scope |= Q(team__isnull=True)
        grouped = (
            rows.filter(scope)
            .values_list("bucket", "team_id", "gpu__model_id")
            .annotate(
                busy=Sum("busy_seconds"),
                util_sum=Sum("util_avg"),
                util_n=Count("util_avg"),
                sm_sum=Sum("sm_active_avg"),
                sm_n=Count("sm_active_avg"),
            )
            .order_by()
        )
    busy_sums: dict[tuple, float] = defaultdict(float)
    util_sums: dict[tuple, list] = defaultdict(lambda: [0.0, 0, 0.0, 0])
    for bucket, team_id, model_id, busy_seconds, *activity in grouped:
        busy_sums[(floor_to_step(bucket, origin, step), team_id)] += busy_seconds or 0
        cell = util_sums[(team_id, model_id)]
        for i, value in enumerate(activity):
            cell[i] += value or 0
    return (
        [(t, team_id, seconds) for (t, team_id), seconds in busy_sums.items()],
        [(team_id, model_id, *sums) for (team_id, model_id), sums in util_sums.items()],
    )


def utilization_series(filters: Filters) -> dict:
    """Allocated and busy GPUs over time per team, and average utilization % per team and GPU
    model. Unallocated GPUs are shown only to those who see all teams, under `UNALLOCATED`.

    Allocated GPUs come from bookings and jobs (`allocated_series`), the same at every range.
    Busy GPUs come from the rollups (busy seconds / bucket seconds, i.e. GPU-equivalents busy):
    per step and team, from the pre-summed (hour, team, model) rollup for windows over a day
    (`_busy_and_util`), from minute rollups for a day. Returns
    {"step", "times", "allocated": {team: [...]}, "busy": {team: [...]},
    "by_team_model": [{"team_slug", "model_name", "util", "sm_active"}], "has_telemetry"}:
    sm_active is the average SM activity where the GPUs report GPM metrics, else None."""
    bucket_seconds = 60 if filters.fine else 3600
    slugs = {t.pk: t.slug for t in filters.teams}
    model_names = dict(GpuModel.objects.values_list("pk", "name"))
    step = step_for(filters)
    origin = floor_to_step(filters.start, datetime(2000, 1, 1, tzinfo=filters.start.tzinfo), step)
    per_step = int(step.total_seconds() // bucket_seconds)
    busy_rows, util_rows = _busy_and_util(filters, origin, step)
    busy: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    for t, team_id, busy_seconds in busy_rows:
        name = slugs.get(team_id, UNALLOCATED) if team_id is not None else UNALLOCATED
        # Average over the step: each bucket adds its share.
        busy[name][t] += (busy_seconds or 0) / bucket_seconds / per_step
    util = {
        (slugs[team_id], model_names[model_id]): (total, n, sm_total, sm_n)
        for team_id, model_id, total, n, sm_total, sm_n in util_rows
        if team_id in slugs and (n or sm_n)
    }
    times = []
    t = floor_to_step(filters.start, origin, step)
    while t < filters.end:
        times.append(t)
        t += step
    allocated = allocated_series(filters, times, step)
    if filters.group_of is not None:
        allocated, busy = _grouped(allocated, filters.group_of), _grouped(busy, filters.group_of)
        util = _grouped_util(util, filters.group_of)
    names = sorted(set(allocated) | set(busy), key=lambda n: (n == UNALLOCATED, n))
    return {
        "step": step,
        "times": times,
        "allocated": {
            n: [round(allocated.get(n, {}).get(t, 0.0), 3) for t in times] for n in names
        },
        "busy": {n: [round(busy[n].get(t, 0.0), 3) for t in times] for n in names},
        "by_team_model": [
            {
                "team_slug": team,
                "model_name": model,
                "util": total / n if n else None,
                "sm_active": sm_total / sm_n if sm_n else None,
            }
            for (team, model), (total, n, sm_total, sm_n) in sorted(util.items())
        ],
        "has_telemetry": bool(busy_rows),
    }


def _grouped(series: dict[str, dict], group_of: dict[str, str]) -> dict[str, dict]:
    """Per-team series summed per group (teams' GPUs add up; the pool stays on its own)."""
    grouped: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    for name, values in series.items():
        target = grouped[group_of.get(name, name)]
        for t, value in values.items():
            target[t] += value
    return grouped


def _grouped_util(util: dict, group_of: dict[str, str]) -> dict:
    """Utilization sums and counts per (group, model): the group's average weighs each GPU
    sample alike, as a team's does."""
    grouped: dict = defaultdict(lambda: [0.0, 0, 0.0, 0])
    for (team, model), sums in util.items():
        cell = grouped[(group_of.get(team, team), model)]
        for i, value in enumerate(sums):
            cell[i] += value or 0
    return {key: tuple(cell) for key, cell in grouped.items()}
