"""How allocations used their GPUs: minute rollups summed over the time each GPU was held.

An allocation is a set of (GPU, [start, end)) holdings: a job's GPUs over all its attempts, or
a booking's GPUs. Its figures:

- GPU-hours held, and busy GPU-hours (the rollups' busy seconds: `apps.telemetry.activity`);
- average activity: SM activity over the minutes that report it where any does, else NVML's
  utilization % (the figure says which; `activity.activity_of`);
- average and peak memory used, against the memory of one GPU of the model;
- idle GPUs: GPUs of the allocation busy less than EFFICIENCY_IDLE_GPU_BUSY_PERCENT of the time
  they were held (asked for 8, used 1: 7 idle GPUs; `activity.held_gpu_is_idle`).

The rollups are read in one grouped query per kind of allocation (a join of the minute rollups
with the job allocations or booking holdings on GPU and time), so a page of jobs costs the same
number of queries as one job.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Avg, Count, DateTimeField, ExpressionWrapper, F, Max, Q, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least

from apps.fleet.models import Gpu
from apps.telemetry.activity import activity_of, covers, held_gpu_is_idle
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup


@dataclass(slots=True)
class GpuUsage:
    """One GPU of an allocation: time held and what its minute rollups say about that time."""

    gpu_id: int
    held_seconds: float = 0.0
    minutes: int = 0
    busy_seconds: float = 0.0
    util_avg: float | None = None
    util_minutes: int = 0
    sm_avg: float | None = None
    sm_minutes: int = 0
    mem_avg_mib: float | None = None
    mem_minutes: int = 0
    mem_peak_mib: int | None = None

    @property
    def covered(self) -> bool:
        """Telemetry covers most of the time held: only then can the GPU be called idle
        (missing telemetry is never taken for idleness)."""
        return covers(self.minutes * 60, self.held_seconds)


@dataclass(slots=True)
class Efficiency:
    """What an allocation did with the GPUs it held (see the module docstring)."""

    gpus: int
    gpu_hours: float
    busy_gpu_hours: float
    activity_percent: float | None
    activity_signal: str | None
    memory_avg_mib: float | None
    memory_peak_mib: int | None
    memory_total_mib: int | None
    idle_gpus: int
    idle_gpu_hours: float
    telemetry_minutes: int
    gpu_model: str | None = None
    covered: bool = False
    per_gpu: list[GpuUsage] = field(default_factory=list, repr=False)

    @property
    def busy_percent(self) -> float | None:
        return 100 * self.busy_gpu_hours / self.gpu_hours if self.gpu_hours else None

    @property
    def memory_peak_percent(self) -> float | None:
        if self.memory_peak_mib is None or not self.memory_total_mib:
            return None
        return 100 * self.memory_peak_mib / self.memory_total_mib

    @property
    def idle_share(self) -> float:
        """Share of the held GPU-time that belongs to idle GPUs (0..1)."""
        return self.idle_gpu_hours / self.gpu_hours if self.gpu_hours else 0.0

    @classmethod
    def from_dict(cls, data: dict) -> "Efficiency":
        """Back from `as_dict` (a stored summary): the figures, without the per-GPU detail."""
        return cls(
            gpus=data["gpus"],
            gpu_hours=data["gpu_hours"],
            busy_gpu_hours=data["busy_gpu_hours"],
            activity_percent=data["activity_percent"],
            activity_signal=data["activity_signal"],
            memory_avg_mib=data["memory_avg_mib"],
            memory_peak_mib=data["memory_peak_mib"],
            memory_total_mib=data["memory_total_mib"],
            idle_gpus=data["idle_gpus"],
            idle_gpu_hours=data["idle_gpu_hours"],
            telemetry_minutes=data["telemetry_minutes"],
            gpu_model=data.get("gpu_model"),
            covered=data.get("telemetry_covered", False),
        )

    def as_dict(self) -> dict:
        return {
            "gpus": self.gpus,
            "gpu_hours": round(self.gpu_hours, 4),
            "busy_gpu_hours": round(self.busy_gpu_hours, 4),
            "busy_percent": _round(self.busy_percent, 1),
            "activity_percent": _round(self.activity_percent, 1),
            "activity_signal": self.activity_signal,
            "memory_avg_mib": _round(self.memory_avg_mib, 0),
            "memory_peak_mib": self.memory_peak_mib,
            "memory_total_mib": self.memory_total_mib,
            "memory_peak_percent": _round(self.memory_peak_percent, 1),
            "idle_gpus": self.idle_gpus,
            "idle_gpu_hours": round(self.idle_gpu_hours, 4),
            "telemetry_minutes": self.telemetry_minutes,
            "gpu_model": self.gpu_model,
            "telemetry_covered": self.covered,
        }


def _round(value: float | None, places: int) -> float | None:
    return None if value is None else round(value, places)


def _weighted(pairs) -> tuple[float | None, int]:
    """Average of (average, minutes) pairs weighted by minutes, and the minutes."""
    total = sum(minutes for avg, minutes in pairs if avg is not None)
    if not total:
        return None, 0
    return sum(avg * minutes for avg, minutes in pairs if avg is not None) / total, total


def summarize(per_gpu: list[GpuUsage], *, memory_total_mib: int | None) -> Efficiency:
    """Fold per-GPU usage into the allocation's figures."""
    held = sum(g.held_seconds for g in per_gpu)
    telemetry_minutes = sum(g.minutes for g in per_gpu)
    sm, _ = _weighted([(g.sm_avg, g.sm_minutes) for g in per_gpu])
    util, _ = _weighted([(g.util_avg, g.util_minutes) for g in per_gpu])
    activity, signal = activity_of(sm_active_avg=sm, util_avg=util)
    mem, _ = _weighted([(g.mem_avg_mib, g.mem_minutes) for g in per_gpu])
    peaks = [g.mem_peak_mib for g in per_gpu if g.mem_peak_mib is not None]
    idle = [
        g
        for g in per_gpu
        if g.covered and held_gpu_is_idle(busy_seconds=g.busy_seconds, held_seconds=g.held_seconds)
    ]
    return Efficiency(
        gpus=len(per_gpu),
        gpu_hours=held / 3600,
        busy_gpu_hours=min(sum(g.busy_seconds for g in per_gpu), held) / 3600,
        activity_percent=activity,
        activity_signal=signal,
        memory_avg_mib=mem,
        memory_peak_mib=max(peaks) if peaks else None,
        memory_total_mib=memory_total_mib,
        idle_gpus=len(idle),
        idle_gpu_hours=sum(g.held_seconds for g in idle) / 3600,
        telemetry_minutes=telemetry_minutes,
        covered=bool(per_gpu) and all(g.covered for g in per_gpu),
        per_gpu=per_gpu,
    )


@dataclass(frozen=True, slots=True)
class Holding:
    """One GPU held by an allocation (`key`: a job or booking id) over [start, end)."""

    key: int
    gpu_id: int
    start: datetime
    end: datetime


def clip(holdings, *, start: datetime | None, end: datetime) -> list[Holding]:
    """The holdings cut to [start, end); those left empty are dropped."""
    clipped = []
    for h in holdings:
        lo = max(h.start, start) if start else h.start
        hi = min(h.end, end)
        if hi > lo:
            clipped.append(Holding(h.key, h.gpu_id, lo, hi))
    return clipped


def _rollup_aggregates() -> dict:
    aggregates = {
        "minutes": Count("id"),
        "busy": Sum("busy_seconds"),
        "util": Avg("util_avg"),
        "util_minutes": Count("util_avg"),
        "mem": Avg("mem_used_avg_mib"),
        "mem_minutes": Count("mem_used_avg_mib"),
        "mem_peak": Max("mem_used_max_mib"),
        "sm": Avg("sm_active_avg"),
        "sm_minutes": Count("sm_active_avg"),
    }
    return aggregates


def _rollup_rows(model, relation: str, key: str, keys, extra: Q, *, start, end):
    """Rollups (`model`: minute or hour) of the GPUs held through `relation` (Gpu's reverse
    relation to job allocations or booking holdings) whose whole bucket lies inside each
    holding's time cut to [start, end), grouped by (allocation key, GPU). The conditions sit in
    one filter() so they share one join."""
    width = timedelta(minutes=1) if model is GpuMinuteRollup else timedelta(hours=1)
    held_end = Least(Coalesce(F(f"gpu__{relation}__end"), Value(end)), Value(end))
    held_start = F(f"gpu__{relation}__start")
    if start is not None:
        held_start = Greatest(held_start, Value(start))
    last_bucket = ExpressionWrapper(held_end - Value(width), output_field=DateTimeField())
    return (
        model.objects.filter(
            extra or Q(),
            **{f"gpu__{relation}__{key}__in": keys},
            bucket__gte=held_start,
            bucket__lte=last_bucket,
        )
        .values("gpu_id", key=F(f"gpu__{relation}__{key}"))
        .annotate(**_rollup_aggregates())
        .order_by()
    )


def _fill(usage: GpuUsage, row: dict, *, minutes_per_row: int) -> None:
    usage.minutes = row["minutes"] * minutes_per_row
    usage.busy_seconds = row["busy"] or 0.0
    usage.util_avg, usage.util_minutes = row["util"], row["util_minutes"] * minutes_per_row
    usage.sm_avg, usage.sm_minutes = row["sm"], row["sm_minutes"] * minutes_per_row
    usage.mem_avg_mib = row["mem"]
    usage.mem_minutes = row["mem_minutes"] * minutes_per_row
    usage.mem_peak_mib = row["mem_peak"]


def usage_of(
    holdings: list[Holding], *, relation: str, key: str, extra: Q | None = None, start=None, end
) -> dict[int, list[GpuUsage]]:
    """Per allocation key: one GpuUsage per GPU it held, with its telemetry: minute rollups,
    or, for GPUs whose minute rollups cover too little of the time (pruned after
    TELEMETRY_MINUTE_RETENTION_DAYS, or never written), the whole hours of hour rollups when
    they cover more. Two grouped queries at most, whatever the number of allocations."""
    per_key: dict[int, dict[int, GpuUsage]] = defaultdict(dict)
    for h in holdings:
        usage = per_key[h.key].setdefault(h.gpu_id, GpuUsage(gpu_id=h.gpu_id))
        usage.held_seconds += (h.end - h.start).total_seconds()
    if not holdings:
        return {}
    rows = _rollup_rows(
        GpuMinuteRollup, relation, key, sorted(per_key), extra, start=start, end=end
    )
    for row in rows:
        usage = per_key[row["key"]].setdefault(row["gpu_id"], GpuUsage(gpu_id=row["gpu_id"]))
        _fill(usage, row, minutes_per_row=1)
    thin = {k for k, gpus in per_key.items() if any(not g.covered for g in gpus.values())}
    if thin:
        rows = _rollup_rows(GpuHourRollup, relation, key, sorted(thin), extra, start=start, end=end)
        for row in rows:
            usage = per_key[row["key"]].get(row["gpu_id"])
            if usage is not None and not usage.covered and row["minutes"] * 60 > usage.minutes:
                _fill(usage, row, minutes_per_row=60)
    return {k: list(gpus.values()) for k, gpus in per_key.items()}


def gpu_models(gpu_ids) -> dict[int, tuple[str, int]]:
    """(model name, memory MiB) of each GPU, one query."""
    return {
        pk: (name, memory)
        for pk, name, memory in Gpu.objects.filter(pk__in=set(gpu_ids)).values_list(
            "pk", "model__name", "model__memory_mib"
        )
    }
