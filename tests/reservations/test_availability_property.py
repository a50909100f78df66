"""The availability search against a brute-force oracle that tries every grid start."""

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from apps.reservations.availability import (
    GpuInfo,
    find_slots,
    free_capacity_timeline,
    free_gpus,
    pick_gpus,
)

SLOT = 15 * 60
BASE = int(datetime(2026, 12, 7, 8, 0, tzinfo=UTC).timestamp())
MINUTE = 60
HOUR = 3600
HORIZON_SLOTS = 40


@st.composite
def fleets(draw):
    node_count = draw(st.integers(1, 3))
    gpus = []
    for node in range(node_count):
        for index in range(draw(st.integers(1, 4))):
            domain = draw(st.sampled_from(["", f"n{node}/nvl0", f"n{node}/nvl1"]))
            gpus.append(
                GpuInfo(node=f"n{node}", index=index, id=len(gpus) + 1, nvlink_domain=domain)
            )
    busy = {}
    for gpu in gpus:
        intervals = []
        for _ in range(draw(st.integers(0, 3))):
            start_min = draw(st.integers(-60, HORIZON_SLOTS * 15))
            length_min = draw(st.integers(1, 240))
            start = BASE + start_min * MINUTE
            intervals.append((start, start + length_min * MINUTE))
        busy[gpu.id] = intervals
    return gpus, busy


def oracle_feasible_starts(gpus, busy, *, count, duration, after, horizon, same_node):
    feasible = []
    t = after
    while t <= horizon:
        free = free_gpus(gpus, busy, t, t + duration)
        if same_node:
            per_node = {}
            for g in free:
                per_node[g.node] = per_node.get(g.node, 0) + 1
            ok = any(n >= count for n in per_node.values())
        else:
            ok = len(free) >= count
        if ok:
            feasible.append(t)
        t += SLOT
    return feasible


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    fleet=fleets(),
    count=st.integers(1, 6),
    duration_slots=st.integers(1, 8),
    after_min=st.integers(0, 60),
    same_node=st.booleans(),
)
def test_find_slots_matches_brute_force_oracle(fleet, count, duration_slots, after_min, same_node):
    gpus, busy = fleet
    duration = duration_slots * SLOT
    after = BASE + after_min * MINUTE
    horizon = BASE + HORIZON_SLOTS * SLOT
    slots = find_slots(
        gpus,
        busy,
        count=count,
        duration=duration,
        after=after,
        horizon=horizon,
        slot=SLOT,
        same_node=same_node,
        limit=1000,
    )
    grid_after = BASE + -(-(after - BASE) // SLOT) * SLOT
    expected = oracle_feasible_starts(
        gpus,
        busy,
        count=count,
        duration=duration,
        after=grid_after,
        horizon=horizon,
        same_node=same_node,
    )
    covered = []
    for slot in slots:
        t = slot.start
        while t <= slot.latest_start:
            covered.append(t)
            t += SLOT
    assert covered == expected
    for slot in slots:
        assert len(slot.gpus) == count == len({g.id for g in slot.gpus})
        free_ids = {g.id for g in free_gpus(gpus, busy, slot.start, slot.start + duration)}
        assert {g.id for g in slot.gpus} <= free_ids
        if same_node:
            assert len({g.node for g in slot.gpus}) == 1


def test_pick_prefers_one_node_best_fit_then_nvlink_domain():
    gpus = [GpuInfo("a", i, i, "a/nvl0" if i < 2 else "a/nvl1") for i in range(4)]
    gpus += [GpuInfo("b", i, 10 + i, "b/nvl0") for i in range(8)]
    picked = pick_gpus(gpus, 2, same_node=False)
    assert {g.node for g in picked} == {"a"}  # the smaller node that fits keeps b whole
    assert len({g.nvlink_domain for g in picked}) == 1
    assert {g.node for g in pick_gpus(gpus, 6, same_node=False)} == {"b"}
    spread = pick_gpus(gpus, 10, same_node=False)
    assert len(spread) == 10 and sum(g.node == "b" for g in spread) == 8
    assert pick_gpus(gpus, 10, same_node=True) is None


def test_free_capacity_timeline_counts_gpus_free_for_whole_bucket():
    gpus = [GpuInfo("a", i, i) for i in range(3)]
    busy = {0: [(BASE + 30 * MINUTE, BASE + 90 * MINUTE)]}
    points = free_capacity_timeline(gpus, busy, start=BASE, end=BASE + 3 * HOUR, bucket=HOUR)
    assert points == [(BASE, 2), (BASE + HOUR, 2), (BASE + 2 * HOUR, 3)]
