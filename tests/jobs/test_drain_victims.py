"""Whole-node jobs within their guarantee: the node they drain is worked out once per cycle,
and a reclaim does not stop work for a job that free GPUs already take."""

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
