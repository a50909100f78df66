"""Borrowed multi-node gangs yield last: a guarantee reclaim takes other victims first, waits
the longer gang patience before stopping a gang that would lose work, and the node it drains
is kept free of other guaranteed work while another node has room."""

from __future__ import annotations

import dataclasses

from apps.jobs.scheduler import SchedulerConfig, schedule
from apps.jobs.scheduler.state import (
    ClusterState,
    PendingReason,
    PriorityClass,
    RunningJob,
    TeamQuota,
)
from tests.jobs.test_scheduler import H100, NOW, fleet, job, pending, placed, running

GANG_PATIENCE = SchedulerConfig().gang_reclaim_patience_seconds
PATIENCE = SchedulerConfig().reclaim_patience_seconds


def gang(job_id=50, team="llm", gpu_ids=range(16), *, started=NOW - 2000, **kw):
    """A borrowed gang larger than any node, restarting from scratch when stopped."""
    return RunningJob(job_id, team, H100, tuple(gpu_ids), started, 7 * 86400.0,
                      PriorityClass.OVER_QUOTA, True, **kw)  # fmt: skip


def quotas(limit=24):
    return [TeamQuota(t, H100, g, limit) for t, g in (("vision", 8), ("llm", 0), ("nlp", 0))]


def test_past_its_patience_a_reclaim_takes_smaller_victims_before_a_borrowed_gang():
    # Both sets are outside the loss budget (half of 8 GPUs x 1 h): the gang would lose
    # 16 x 2,000 GPU-s, the eight 1-GPU jobs on n2 8 x 9,000. By loss alone the gang stops;
    # it is a multi-node gang that would lose its work, so the small jobs stop instead.
    small = [running(60 + i, "nlp", [16 + i], started=NOW - 9000) for i in range(8)]
    state = ClusterState(
        NOW, fleet(3, 8), [job(1, count=8, age=PATIENCE)], [gang(), *small], quotas=quotas()
    )
    d = schedule(state)
    assert sorted(p.job_id for p in d.preemptions) == list(range(60, 68))
    assert set(d.after_preemption[0].gpu_ids) == set(range(16, 24))
    # Past the gang patience the cheapest set goes first again: the gang.
    state.queued = [job(1, count=8, age=GANG_PATIENCE)]
    assert [p.job_id for p in schedule(state).preemptions] == [50]
    # A gang that resumes from its checkpoint loses nothing: it stops at once.
    state.queued = [job(1, count=8)]
    state.running = [gang(checkpointable=True), *small]
    assert [(p.job_id, p.gpu_seconds_lost) for p in schedule(state).preemptions] == [(50, 0.0)]


def test_a_borrowed_gang_alone_in_the_way_stops_only_after_the_gang_patience():
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=8, age=PATIENCE)], [gang()],
                         quotas=quotas())  # fmt: skip
    d = schedule(state)
    assert d.preemptions == []
    waiting = pending(d)[1]
    assert waiting.reason == PendingReason.RECLAIMING_GUARANTEE
    minutes = round((GANG_PATIENCE - PATIENCE) / 60)
    assert (
        waiting.message == f"Reclaiming your guarantee: 1 job of team llm stops in {minutes} min."
    )
    assert waiting.estimated_start == NOW + GANG_PATIENCE - PATIENCE
    state.queued = [job(1, count=8, age=GANG_PATIENCE)]
    d = schedule(state)
    assert [p.job_id for p in d.preemptions] == [50]
    assert d.after_preemption[0].job_id == 1
    # Within the loss budget (a gang that has just passed its minimum runtime, for a long
    # job) it stops at once: the longer patience is for gangs that would lose much.
    young = gang(started=NOW - 1800)
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=8, runtime=86400.0)], [young],
                         quotas=quotas())  # fmt: skip
    assert [p.job_id for p in schedule(state).preemptions] == [50]


def test_the_estimate_names_a_job_preempted_the_most_times_only_when_nothing_else_frees_room():
    # On n0 an nlp job preempted twice would be the first to become preemptible; the reclaim
    # spares it while audio's job frees the room, and the estimate says so.
    q = [TeamQuota(t, H100, g, 8) for t, g in (("vision", 8), ("nlp", 0), ("audio", 0))]
    twice = RunningJob(10, "nlp", H100, (0, 1, 2, 3), NOW - 1700, 36_000.0,
                       PriorityClass.OVER_QUOTA, True, preemptions=2)  # fmt: skip
    run = [twice, running(11, "audio", [4, 5, 6, 7], started=NOW - 1500, runtime=36_000.0)]
    state = ClusterState(NOW, fleet(1, 8), [job(1, count=4)], run, quotas=q)
    waiting = pending(schedule(state))[1]
    assert waiting.message == "Reclaiming your guarantee: 1 job of team audio stops in 5 min."
    assert waiting.estimated_start == NOW + 300
    # Once it resumes from a checkpoint it loses nothing and is named first.
    state.running = [dataclasses.replace(twice, checkpointable=True), run[1]]
    waiting = pending(schedule(state))[1]
    assert waiting.message == "Reclaiming your guarantee: 1 job of team nlp stops in 2 min."


def test_guaranteed_work_keeps_off_the_node_that_drains_for_a_whole_node_job():
    # vision waits for a whole node; n0's work (guaranteed, not preemptible) ends first, so n0
    # drains. audio's 1-GPU job would best-fit on n0 (2 free); it goes to n1 instead.
    run = [
        running(10, "nlp", range(6), started=NOW - 3000, runtime=3600.0, over=False),
        running(11, "nlp", [8, 9], started=NOW - 3000, runtime=36_000.0, over=False),
    ]
    q = [TeamQuota(t, H100, 8, 16) for t in ("vision", "nlp", "audio")]
    audio = job(2, "audio", count=1)
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=8), audio], run, quotas=q)
    assert placed(schedule(state))[2][0] in range(10, 16)
    # Without a job to drain for, best fit puts it on n0.
    state.queued = [audio]
    assert placed(schedule(state))[2][0] in (6, 7)
