"""FreePool's indexes (nodes by free count, free GPUs per NVLink domain and rack) against the
pool's free lists after any sequence of takes and gives, and its multi-node search against a
plain reading of the rule it implements (sort every node, then try every domain and rack)."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from apps.jobs.scheduler.pool import FreePool
from apps.jobs.scheduler.state import GpuInfo


def usable_gpus(pool: FreePool, model: str, deadline: float) -> dict[str, list[int]]:
    """Per node, the GPUs a job running until ``deadline`` may take: free ones and booked
    ones whose booking starts after it."""
    usable: dict[str, list[int]] = {}
    for node, ids in pool.free[model].items():
        more = [gid for start, gid in pool.booked[model].get(node, ()) if start >= deadline]
        if ids or more:
            usable[node] = sorted(ids + more)
    return usable


def reference_spread(pool: FreePool, model: str, count: int, deadline: float):
    """The multi-node placement ``FreePool.find`` documents, computed from scratch: greedy on
    the nodes with the most usable GPUs first (names break ties); the first NVLink domain,
    else rack, by name where greedy needs no more nodes than that."""
    usable = usable_gpus(pool, model, deadline)
    if sum(len(ids) for ids in usable.values()) < count:
        return None

    def greedy(nodes):
        picks = []
        for used, node in enumerate(sorted(nodes, key=lambda n: (-len(usable[n]), n)), 1):
            picks.extend(usable[node][: count - len(picks)])
            if len(picks) == count:
                return picks, used
        return None

    best, fewest = greedy(usable)
    for group_of in (pool.domain_of, pool.rack_of):
        groups = defaultdict(list)
        for node in usable:
            if group_of[node] is not None:
                groups[group_of[node]].append(node)
        for group in sorted(groups):
            found = greedy(groups[group])
            if found is not None and found[1] <= fewest:
                return found[0]
    return best


@st.composite
def pools(draw):
    nodes = draw(st.integers(1, 7))
    gpus = []
    for n in range(nodes):
        domain = draw(st.sampled_from([None, "d0", "d1", f"own{n}"]))
        rack = draw(st.sampled_from([None, "r0", "r1"]))
        for _ in range(draw(st.sampled_from([1, 2, 4, 8]))):
            gpus.append(GpuInfo(len(gpus), f"n{n}", "A", domain, rack))
    # takes and gives in any order (a GPU given back only after it was taken), then bookings
    steps = draw(st.lists(st.tuples(st.booleans(), st.integers(0, len(gpus) - 1)), max_size=40))
    booked = draw(st.lists(st.integers(0, len(gpus) - 1), max_size=6, unique=True))
    return gpus, steps, booked


@settings(max_examples=300, deadline=None)
@given(pools(), st.integers(1, 20), st.sampled_from([100.0, 1000.0]))
def test_indexes_follow_takes_and_gives_and_spread_matches_the_rule(case, count, deadline):
    gpus, steps, booked = case
    pool = FreePool(gpus)
    taken: set[int] = set()
    for take, gid in steps:
        if take and gid not in taken:
            pool.take((gid,))
            taken.add(gid)
        elif not take and gid in taken:
            pool.give((gid,))
            taken.discard(gid)
    for k, gid in enumerate(booked):
        pool.set_aside_booked(gid, 500.0 * k)  # some start before the deadline, some after

    free = pool.free["A"]
    for c, nodes in enumerate(pool.by_count["A"]):
        assert nodes == sorted(n for n, ids in free.items() if c and len(ids) == c)
    for group_of, group_free in zip(
        (pool.domain_of, pool.rack_of), pool.group_free["A"], strict=True
    ):
        sums: dict[str, int] = defaultdict(int)
        for node, ids in free.items():
            if group_of[node] is not None:
                sums[group_of[node]] += len(ids)
        assert group_free == sums

    picks = pool.find("A", count, False, deadline)
    usable = usable_gpus(pool, "A", deadline)
    if all(len(ids) < count for ids in usable.values()):
        assert picks == reference_spread(pool, "A", count, deadline)
    else:  # one node has room: best fit on one node
        assert picks is not None
        assert len({pool.info[g].node for g in picks}) == 1
    if picks is not None:
        assert len(set(picks)) == count
        assert set(picks) <= {g for ids in usable.values() for g in ids}
