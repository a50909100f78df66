"""Reads of telemetry: downsampled series per GPU and idle GPU-hours."""

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.telemetry.choices import IdleKind
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup, GpuSample, IdleInterval

MAX_POINTS = 2000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _bucket(moment: datetime, step: timedelta) -> datetime:
    return EPOCH + ((moment - EPOCH) // step) * step


def gpu_series(*, gpu_id: int, start: datetime, end: datetime, step: timedelta) -> list[dict]:
    """Utilization, memory and power of one GPU over [start, end) in buckets of `step`, from the
    coarsest source that still resolves the step (hour rollups, minute rollups, raw samples).
    Caller caps (end - start) / step at MAX_POINTS."""
    if step >= timedelta(minutes=1):
        rollup = GpuHourRollup if step >= timedelta(hours=1) else GpuMinuteRollup
        values = rollup.objects.filter(
            gpu_id=gpu_id, bucket__gte=start, bucket__lt=end
        ).values_list(
            "bucket", "util_avg", "util_max", "mem_used_avg_mib", "power_avg_w", "samples"
        )
    else:
        rows = GpuSample.objects.filter(gpu_id=gpu_id, ts__gte=start, ts__lt=end)
        values = [
            (ts, util, util, mem, power, 1)
            for ts, util, mem, power in rows.values_list(
                "ts", "util_gpu", "mem_used_mib", "power_w"
            )
        ]
    buckets: dict[datetime, list] = defaultdict(list)
    for moment, util_avg, util_max, mem, power, weight in values:
        buckets[_bucket(moment, step)].append((util_avg, util_max, mem, power, weight))
    series = []
    for moment in sorted(buckets):
        items = buckets[moment]
        series.append(
            {
                "t": moment,
                "util_avg": _mean([(u, w) for u, _, _, _, w in items]),
                "util_max": max((m for _, m, _, _, _ in items if m is not None), default=None),
                "mem_used_mib": _mean([(m, w) for _, _, m, _, w in items]),
                "power_w": _mean([(p, w) for _, _, _, p, w in items]),
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
