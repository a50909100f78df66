"""A multi-node gang that restarts from scratch starts on borrowed GPUs only while borrowed
GPUs x its max runtime stay within ``borrowed_gang_max_gpu_hours``: a reclaim that stops it
later throws away all of its GPUs' work. Within its team's guarantee it starts as before."""

from __future__ import annotations

from apps.jobs.scheduler import SchedulerConfig, schedule
from apps.jobs.scheduler.state import ClusterState, PendingReason, TeamQuota
from tests.jobs.test_scheduler import H100, NOW, fleet, job, pending, placed, running

LIMIT_H = SchedulerConfig().borrowed_gang_max_gpu_hours
DAY = 86400.0


def gang(job_id, *, runtime, age=0.0, **kw):
    return job(job_id, "llm", 16, runtime=runtime, age=age, same_node=False, **kw)


def state(queued, *, llm_busy=True, llm_guarantee=16):
    """Four 8-GPU nodes; llm is guaranteed 16 GPUs and, when ``llm_busy``, uses them all on
    n0 and n1, so a 16-GPU gang of llm would borrow all of n2 and n3."""
    held = [running(90 + i, "llm", [i], over=False) for i in range(16)] if llm_busy else []
    quotas = [TeamQuota("llm", H100, llm_guarantee, 32), TeamQuota("vision", H100, 16, 32)]
    return ClusterState(NOW, fleet(4, 8), queued, held, quotas=quotas)


def test_a_long_gang_does_not_start_on_borrowed_gpus_and_says_why():
    long_gang = gang(1, runtime=3 * DAY, age=60)  # 16 GPUs x 72 h borrowed: 48 GPU-days
    assert LIMIT_H < 16 * 72
    d = schedule(state([long_gang]))
    assert placed(d) == {}
    waiting = pending(d)[1]
    assert waiting.reason == PendingReason.GANG_BORROW_LIMIT
    assert "would borrow 16 GPUs beyond team llm's guarantee for up to 48 GPU-days; limit 32" in (
        waiting.message
    )


def test_a_short_gang_behind_it_still_borrows():
    # Same shape, queued later, 16 GPUs x 1 h: within the limit, it takes the free nodes.
    d = schedule(state([gang(1, runtime=3 * DAY, age=60), gang(2, runtime=3600.0)]))
    assert sorted(placed(d)[2]) == list(range(16, 32))
    assert 1 not in placed(d)


def test_a_checkpointable_gang_borrows_and_a_gang_within_the_guarantee_starts():
    d = schedule(state([gang(1, runtime=3 * DAY, checkpointable=True)]))
    assert sorted(placed(d)[1]) == list(range(16, 32))
    d = schedule(state([gang(1, runtime=3 * DAY)], llm_busy=False))
    assert len(placed(d)[1]) == 16
    assert not d.placements[0].over_quota


def test_a_gang_larger_than_the_guarantee_ever_is_still_lent_gpus():
    # Guaranteed 8, never 16: waiting for the guarantee would never end.
    d = schedule(state([gang(1, runtime=3 * DAY)], llm_busy=False, llm_guarantee=8))
    assert len(placed(d)[1]) == 16
    assert d.placements[0].over_quota
