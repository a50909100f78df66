"""Where and when `count` GPUs of one model are free: pure functions, no Django.

The selectors load GPUs and their active holdings and call these; the same code answers the
API's availability search and picks the GPUs of a new booking, and property tests check it
against a brute-force oracle.

Times are whole seconds since the Unix epoch (ints): the search runs over tens of thousands of
holdings, and ints are several times cheaper to load and compare than datetimes. Slot starts
lie on a grid of `slot` seconds anchored at the epoch. `to_epoch`/`from_epoch` convert.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

Interval = tuple[int, int]


def to_epoch(moment: datetime) -> int:
    """Whole seconds since the epoch, rounded down."""
    return int(moment.timestamp() // 1)


def to_epoch_ceil(moment: datetime) -> int:
    """Whole seconds since the epoch, rounded up (for the end of a busy interval)."""
    return -int(-moment.timestamp() // 1)


def from_epoch(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def seconds(duration: timedelta) -> int:
    return int(duration.total_seconds())


class GpuInfo(NamedTuple):
    """A GPU as the search and the pick see it; ordered by node, then index. A tuple: the
    search builds one per GPU of the model (10,000 at a time) and the pick sorts them, and
    tuples are several times cheaper to make and compare than dataclass instances."""

    node: str
    index: int
    id: int
    nvlink_domain: str = ""
    uuid: str = ""


@dataclass(frozen=True)
class Slot:
    """`gpus` are free for [start, start + duration); any grid start up to `latest_start` is too."""

    start: int
    latest_start: int
    gpus: tuple[GpuInfo, ...]


def ceil_to_grid(moment: int, slot: int) -> int:
    return -(-moment // slot) * slot


def floor_to_grid(moment: int, slot: int) -> int:
    return (moment // slot) * slot


def round_up_to_slot(duration: timedelta, slot: timedelta) -> timedelta:
    return max(slot, -(-duration // slot) * slot)


def is_on_grid(moment: datetime, slot: timedelta) -> bool:
    return moment.timestamp() % slot.total_seconds() == 0


def overlaps(intervals: Sequence[Interval], start: int, end: int) -> bool:
    return any(s < end and start < e for s, e in intervals)


def free_gpus(
    gpus: Iterable[GpuInfo], busy: Mapping[int, Sequence[Interval]], start: int, end: int
) -> list[GpuInfo]:
    return [g for g in gpus if not overlaps(busy.get(g.id, ()), start, end)]


def _best_fit(groups: Mapping[str, list[GpuInfo]], count: int) -> list[GpuInfo] | None:
    """The smallest group that still holds `count`, so big holes stay whole for big asks."""
    fitting = [
        (len(members), key) for key, members in groups.items() if key and len(members) >= count
    ]
    if not fitting:
        return None
    return sorted(groups[min(fitting)[1]])[:count]


def pick_gpus(free: Sequence[GpuInfo], count: int, *, same_node: bool) -> list[GpuInfo] | None:
    """Choose `count` of the free GPUs: one node if possible (best fit, then one NVLink domain
    inside it), else one NVLink domain, else as few nodes as possible. None if impossible."""
    if len(free) < count or count <= 0:
        return None
    by_node: dict[str, list[GpuInfo]] = defaultdict(list)
    for gpu in free:
        by_node[gpu.node].append(gpu)
    fitting_nodes = [(len(m), node) for node, m in by_node.items() if len(m) >= count]
    if fitting_nodes:
        node_gpus = by_node[min(fitting_nodes)[1]]
        by_domain: dict[str, list[GpuInfo]] = defaultdict(list)
        for gpu in node_gpus:
            by_domain[gpu.nvlink_domain].append(gpu)
        return _best_fit(by_domain, count) or sorted(node_gpus)[:count]
    if same_node:
        return None
    by_domain = defaultdict(list)
    for gpu in free:
        by_domain[gpu.nvlink_domain].append(gpu)
    in_one_domain = _best_fit(by_domain, count)
    if in_one_domain:
        return in_one_domain
    chosen: list[GpuInfo] = []
    for node in sorted(by_node, key=lambda n: (-len(by_node[n]), n)):
        chosen.extend(sorted(by_node[node])[: count - len(chosen)])
        if len(chosen) == count:
            break
    return chosen


def _feasible_starts(
    intervals: Sequence[Interval],
    *,
    duration: int,
    after: int,
    horizon: int,
    slot: int,
) -> list[tuple[int, int]]:
    """Grid ranges [lo, hi] of starts t with [t, t + duration) clear of `intervals`.

    The search runs this for every GPU of the model, so the grid arithmetic is written out
    (`ceil_to_grid`, `floor_to_grid`) rather than called."""
    ranges = []
    cursor = after
    for busy_start, busy_end in sorted(intervals):
        if busy_end <= cursor:
            continue
        lo = -(-cursor // slot) * slot
        hi = (busy_start - duration) // slot * slot
        if hi > horizon:
            hi = horizon
        if lo <= hi:
            ranges.append((lo, hi))
        cursor = busy_end
        if cursor > horizon:
            return ranges
    lo = -(-cursor // slot) * slot
    if lo <= horizon:
        ranges.append((lo, horizon))
    return ranges


def _windows_with_coverage(
    ranges: Iterable[tuple[int, int]], count: int, slot: int
) -> list[tuple[int, int]]:
    """Sweep: maximal grid windows where at least `count` of the ranges cover each start."""
    deltas: dict[int, int] = defaultdict(int)
    for lo, hi in ranges:
        deltas[lo] += 1
        deltas[hi + slot] -= 1
    windows: list[tuple[int, int]] = []
    coverage, open_at = 0, None
    for moment in sorted(deltas):
        coverage += deltas[moment]
        if coverage >= count and open_at is None:
            open_at = moment
        elif coverage < count and open_at is not None:
            windows.append((open_at, moment - slot))
            open_at = None
    return windows


def _merge(windows: Iterable[tuple[int, int]], slot: int) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(windows):
        if merged and lo <= merged[-1][1] + slot:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def feasible_starts(
    intervals: Sequence[Interval], *, duration: int, after: int, horizon: int, slot: int
) -> list[tuple[int, int]]:
    """Grid ranges [lo, hi] of starts t in [after, horizon] with [t, t + duration) clear of
    `intervals`, in order and disjoint. `after` and `horizon` lie on the grid."""
    return _feasible_starts(intervals, duration=duration, after=after, horizon=horizon, slot=slot)


def intersect_starts(
    first: Sequence[tuple[int, int]], second: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The grid starts in both lists of ordered, disjoint ranges [lo, hi]: a start is clear of
    two sets of busy intervals when it is clear of each."""
    both, i, j = [], 0, 0
    while i < len(first) and j < len(second):
        lo, hi = max(first[i][0], second[j][0]), min(first[i][1], second[j][1])
        if lo <= hi:
            both.append((lo, hi))
        if first[i][1] < second[j][1]:
            i += 1
        else:
            j += 1
    return both


def start_windows(
    gpus: Sequence[GpuInfo],
    starts: Mapping[int, Sequence[tuple[int, int]]],
    *,
    count: int,
    slot: int,
    same_node: bool = False,
) -> list[tuple[int, int]]:
    """Every maximal grid window [lo, hi] of starts at which `count` GPUs (of one node if
    `same_node`) can start, in order, given each GPU's feasible start ranges."""
    if count <= 0:
        return []
    groups: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for gpu in gpus:
        groups[gpu.node if same_node else ""].extend(starts.get(gpu.id, ()))
    return _merge(
        (w for ranges in groups.values() for w in _windows_with_coverage(ranges, count, slot)), slot
    )


def slots_in_windows(
    gpus: Sequence[GpuInfo],
    starts: Mapping[int, Sequence[tuple[int, int]]],
    windows: Iterable[tuple[int, int]],
    *,
    count: int,
    same_node: bool = False,
) -> list[Slot]:
    """A slot per window of `start_windows`, with the GPUs to book at its first start."""
    slots = []
    for lo, hi in windows:
        free_ids = set()
        for gpu_id, ranges in starts.items():
            for a, b in ranges:
                if a <= lo <= b:
                    free_ids.add(gpu_id)
                    break
        picked = pick_gpus([g for g in gpus if g.id in free_ids], count, same_node=same_node)
        if picked is None:  # cannot happen when the sweep is right; keep the answer honest
            continue
        slots.append(Slot(start=lo, latest_start=hi, gpus=tuple(picked)))
    return slots


def slots_from_starts(
    gpus: Sequence[GpuInfo],
    starts: Mapping[int, Sequence[tuple[int, int]]],
    *,
    count: int,
    slot: int,
    same_node: bool = False,
    limit: int = 5,
) -> list[Slot]:
    """The earliest windows (up to `limit`) in which `count` GPUs can start, given each GPU's
    feasible start ranges (a GPU missing from `starts` never can), each with the GPUs to book."""
    windows = start_windows(gpus, starts, count=count, slot=slot, same_node=same_node)
    return slots_in_windows(gpus, starts, windows[:limit], count=count, same_node=same_node)


def find_slots(
    gpus: Sequence[GpuInfo],
    busy: Mapping[int, Sequence[Interval]],
    *,
    count: int,
    duration: int,
    after: int,
    horizon: int,
    slot: int,
    same_node: bool = False,
    limit: int = 5,
) -> list[Slot]:
    """The earliest windows (up to `limit`) in which `count` GPUs are free for `duration`,
    starting on the grid between `after` and `horizon`, each with the GPUs to book."""
    after = ceil_to_grid(after, slot)
    horizon = floor_to_grid(horizon, slot)
    if count <= 0 or after > horizon:
        return []
    starts = {
        gpu.id: _feasible_starts(
            busy.get(gpu.id, ()), duration=duration, after=after, horizon=horizon, slot=slot
        )
        for gpu in gpus
    }
    return slots_from_starts(gpus, starts, count=count, slot=slot, same_node=same_node, limit=limit)


def free_capacity_timeline(
    gpus: Sequence[GpuInfo],
    busy: Mapping[int, Sequence[Interval]],
    *,
    start: int,
    end: int,
    bucket: int,
) -> list[tuple[int, int]]:
    """For each bucket of [start, end): how many GPUs are free for the whole bucket."""
    buckets = []
    moment = start
    while moment < end:
        buckets.append(moment)
        moment += bucket
    busy_in: list[set[int]] = [set() for _ in buckets]
    ids = {g.id for g in gpus}
    for gpu_id, intervals in busy.items():
        if gpu_id not in ids:
            continue
        for s, e in intervals:
            first = max(0, (s - start) // bucket)
            last = min(len(buckets) - 1, -((start - e) // bucket) - 1)
            for i in range(first, last + 1):
                busy_in[i].add(gpu_id)
    return [(b, len(ids) - len(taken)) for b, taken in zip(buckets, busy_in, strict=True)]
