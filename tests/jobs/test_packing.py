"""Packing borrowed work apart from guaranteed work (``SchedulerConfig.pack_borrowed``): a
reclaim then finds nodes with borrowed work only. Off by default (see the bench)."""

from __future__ import annotations

import pytest

from apps.jobs.scheduler import SchedulerConfig, schedule
from apps.jobs.scheduler.replay import JOB_COLUMNS, TraceJob, simulate
from apps.jobs.scheduler.state import (
    ClusterState,
    GpuInfo,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
)
from apps.jobs.scheduler.trace import parse_fleet

GPUS = [GpuInfo(n * 4 + i, f"n{n}", "A") for n in range(2) for i in range(4)]
QUOTAS = [TeamQuota("owner", "A", 4, 8), TeamQuota("lender", "A", 0, 8)]


def state(queued, running) -> ClusterState:
    return ClusterState(1000.0, GPUS, queued, running, quotas=QUOTAS)


def nodes_of(decision) -> dict[int, set[str]]:
    return {p.job_id: {GPUS[g].node for g in p.gpu_ids} for p in decision.placements}


@pytest.mark.parametrize("pack, lender_node", [(False, "n0"), (True, "n1")])
def test_borrowed_work_keeps_off_nodes_with_guaranteed_work(pack, lender_node):
    """n0 runs a guaranteed job, n1 a borrowed one; each has 3 free GPUs. Best fit alone takes
    the first node for both new jobs; packed, the borrowed job joins the borrowed one."""
    running = [
        RunningJob(1, "owner", "A", (0,), 0.0, 7200, PriorityClass.OVER_QUOTA, False),
        RunningJob(2, "lender", "A", (4,), 0.0, 7200, PriorityClass.OVER_QUOTA, True),
    ]
    queued = [
        QueuedJob(10, "owner", "A", 1, 3600, 900.0),
        QueuedJob(11, "lender", "A", 1, 3600, 900.0),
    ]
    decision = schedule(state(queued, running), config=SchedulerConfig(pack_borrowed=pack))
    placed = nodes_of(decision)
    assert placed[10] == {"n0"}  # guaranteed work: with the guaranteed job either way
    assert placed[11] == {lender_node}
    over = {p.job_id: p.over_quota for p in decision.placements}
    assert over == {10: False, 11: True}


def test_packing_falls_back_to_any_node_with_room():
    """Only n0 has room: the borrowed job goes there beside the guaranteed work."""
    running = [
        RunningJob(1, "owner", "A", (0,), 0.0, 7200, PriorityClass.OVER_QUOTA, False),
        RunningJob(2, "lender", "A", (4, 5, 6, 7), 0.0, 7200, PriorityClass.OVER_QUOTA, True),
    ]
    queued = [QueuedJob(11, "lender", "A", 2, 3600, 900.0)]
    decision = schedule(state(queued, running), config=SchedulerConfig(pack_borrowed=True))
    assert nodes_of(decision) == {11: {"n0"}}


def test_a_reclaim_on_a_small_fleet_with_and_without_packing():
    """Two 4-GPU nodes, the owner guaranteed 5 GPUs. The owner runs one job on n0; the lender
    borrows 3 GPUs for long jobs; later the owner wants a 4-GPU gang, within its guarantee.
    Best fit puts the borrowed jobs beside the owner's on n0, so the gang fits on n1 at once;
    packed apart they fill n1 and the gang must wait for a reclaim: packing is no free lunch,
    which is why it is off by default."""
    gpus = parse_fleet("2x4:A")
    jobs = [TraceJob(1, 0.0, 36_000, 1, "owner")]
    jobs += [TraceJob(k, 10.0 + k, 36_000, 1, "lender") for k in range(2, 5)]
    jobs.append(TraceJob(9, 600.0, 3600, 4, "owner"))

    def run(pack):
        config = SchedulerConfig(pack_borrowed=pack)
        quotas = [TeamQuota("owner", "A", 5, 8), TeamQuota("lender", "A", 0, 8)]
        result = simulate(jobs, gpus, quotas, "fairshare", config)
        rows = {r[0]: dict(zip(JOB_COLUMNS, r, strict=True)) for r in result.job_rows}
        return result, rows

    plain, plain_rows = run(False)
    packed, packed_rows = run(True)
    # Best fit: the borrowed jobs share n0 with the owner's, the 4-GPU gang takes n1 at once.
    assert plain.preemptions == 0 and plain_rows[9]["first_start"] == 600.0
    # Packed: the borrowed jobs fill n1; the gang needs n1 back (n0 holds the owner's own job).
    assert packed.preemptions == 3
    # ... once the youngest victim (started at 14 s) has run its minimum runtime
    assert packed_rows[9]["first_start"] == 1800.0 + 14.0
