"""Whole-node jobs and guarantee reclaims: the node a waiting whole-node job drains is worked
out once per cycle; a reclaim stops nothing for a job that free GPUs already take."""

from __future__ import annotations

from collections import Counter

from apps.jobs.scheduler import schedule
from apps.jobs.scheduler.core import Engine
from apps.jobs.scheduler.state import ClusterState, TeamQuota
from tests.jobs.test_scheduler import H100, NOW, fleet, job, pending, running


def test_the_node_a_whole_node_job_drains_is_worked_out_once_per_cycle(monkeypatch):
    # vision's 8-GPU job fits no node (2 free on each); the cycle asks where it would have
    # room before the guarantee pass, after it, and for the job's message: one answer each
    # node, as nothing changed in between.
    asked = Counter()
    ready = Engine._node_ready

    def counting(self, job, model, node):
        asked[node] += 1
        return ready(self, job, model, node)

    monkeypatch.setattr(Engine, "_node_ready", counting)
    run = [running(10 + n, "nlp", range(8 * n, 8 * n + 6), started=NOW - 60) for n in range(3)]
    q = [TeamQuota(t, H100, 8, 24) for t in ("vision", "nlp")]
    d = schedule(ClusterState(NOW, fleet(3, 8), [job(1, count=8)], run, quotas=q))
    assert d.placements == [] and d.preemptions == []
    assert pending(d)[1].estimated_start == NOW + 1800 - 60  # nlp's jobs may stop then
    assert asked == {"n0": 1, "n1": 1, "n2": 1}


def test_a_reclaim_places_a_job_that_gpus_freed_earlier_in_the_pass_take():
    # vision's 2-GPU job stops nlp's whole-node job on n0 (the cheaper victim) and takes two
    # of its GPUs; its 4-GPU job then starts on the six left there. It used to stop audio's
    # job on n1 as well, as if n0 had no room.
    run = [
        running(10, "nlp", range(8), started=NOW - 9000),
        running(11, "audio", range(8, 16), started=NOW - 20_000),
    ]
    q = [TeamQuota(t, H100, g, 16) for t, g in (("vision", 8), ("nlp", 0), ("audio", 0))]
    queued = [job(1, count=2, runtime=86400.0, age=60), job(2, count=4, runtime=86400.0)]
    d = schedule(ClusterState(NOW, fleet(2, 8), queued, run, quotas=q))
    assert [p.job_id for p in d.preemptions] == [10]
    assert set(d.after_preemption[0].gpu_ids) <= set(range(8))
    assert [p.job_id for p in d.placements] == [2]
    assert set(d.placements[0].gpu_ids) <= set(range(8))
