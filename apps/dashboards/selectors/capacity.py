"""Capacity against demand over the window: GPUs powered on (in the fleet and on a node not
powered down to save energy) beside the GPUs jobs ran on and the GPUs queued jobs waited for."""

from bisect import bisect_right
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from apps.dashboards.selectors.filters import Filters
from apps.fleet.models import Gpu
from apps.fleet.selectors import powered_off_intervals
from apps.jobs.holdings import allocations_holding
from apps.jobs.models import Job

POINTS = 200  # samples over the window, at least a minute apart


class _Counter:
    """How many of some weighted intervals cover an instant: weights started by then less
    weights ended by then (bisect over the sorted starts and ends)."""

    def __init__(self, intervals) -> None:
        starts, ends = [], []
        for start, end, weight in intervals:
            if end > start:
                starts.append((start, weight))
                ends.append((end, weight))
        self.starts, self.ends = sorted(starts), sorted(ends)
        self.start_sums = _running_sums(self.starts)
        self.end_sums = _running_sums(self.ends)

    def at(self, moment: datetime) -> int:
        begun = bisect_right(self.starts, (moment, float("inf")))
        over = bisect_right(self.ends, (moment, float("inf")))
        return self.start_sums[begun] - self.end_sums[over]


def _running_sums(pairs) -> list[int]:
    sums = [0]
    for _, weight in pairs:
        sums.append(sums[-1] + weight)
    return sums


def capacity(filters: Filters) -> dict:
    """Sample times and, at each: ``powered_on`` GPUs (of the chosen model), ``running`` GPUs
    held by jobs of the visible teams and ``queued`` GPUs their waiting jobs asked for."""
    now = timezone.now()
    start, end = filters.start, min(filters.end, now)
    if end <= start:
        return {"times": [], "powered_on": [], "running": [], "queued": []}
    gpus = Gpu.objects.filter(mig_parent__isnull=True, in_fleet_since__lt=end).exclude(
        retired_at__lte=start
    )
    if filters.gpu_model:
        gpus = gpus.filter(model=filters.gpu_model)
    gpu_rows = list(gpus.values_list("node_id", "in_fleet_since", "retired_at"))
    per_node: dict[int, int] = {}
    for node_id, _, _ in gpu_rows:
        per_node[node_id] = per_node.get(node_id, 0) + 1
    in_fleet = _Counter((joined, left or end, 1) for _, joined, left in gpu_rows)
    off = _Counter(
        (i.start, i.end, per_node[i.node_id])
        for i in powered_off_intervals(start, end)
        if i.node_id in per_node
    )
    allocations = allocations_holding(start, end).filter(job__team_id__in=filters.team_ids)
    jobs = Job.objects.filter(submitted_at__lt=end, team_id__in=filters.team_ids).exclude(
        started_at__lte=start
    )
    if filters.gpu_model:
        allocations = allocations.filter(gpu__model=filters.gpu_model)
        jobs = jobs.filter(Q(gpu_model=filters.gpu_model) | Q(gpu_model__isnull=True))
    running = _Counter((s, e or end, 1) for s, e in allocations.values_list("start", "end"))
    queued = _Counter(
        (submitted, started or finished or end, count)
        for submitted, started, finished, count in jobs.values_list(
            "submitted_at", "started_at", "finished_at", "gpu_count"
        )
    )
    step = max((end - start) / POINTS, timedelta(minutes=1))
    times = []
    moment = start
    while moment <= end:
        times.append(moment)
        moment += step
    return {
        "times": times,
        "powered_on": [in_fleet.at(t) - off.at(t) for t in times],
        "running": [running.at(t) for t in times],
        "queued": [queued.at(t) for t in times],
    }
