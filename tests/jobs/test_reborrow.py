"""A job a reclaim stopped once, that would lose its work again and whose runtime limit is
over a day, restarts only within its team's guarantee, not on borrowed GPUs
(``Engine._may_borrow``): borrowing again it would likely be stopped again, later and at a
higher loss. On the Alibaba pod list, pods that run for months were stopped up to seven
times each before this rule."""

from __future__ import annotations

import dataclasses

import pytest

from apps.jobs.scheduler import SchedulerConfig, schedule
from apps.jobs.scheduler.replay import JOB_COLUMNS, TraceJob, simulate
from apps.jobs.scheduler.state import ClusterState, PendingReason, PriorityClass, TeamQuota
from apps.jobs.scheduler.trace import parse_fleet
from tests.jobs.test_scheduler import H100, NOW, fleet, job, pending, placed, running

DAY = 24 * 3600.0


def state(queued, *, vision_holds=2, guarantee=2):
    """16 GPUs; vision (guarantee ``guarantee``, limit 16) runs ``vision_holds`` GPUs within
    its guarantee; the rest is free."""
    run = [running(1, "vision", range(vision_holds), over=False)] if vision_holds else []
    quotas = [TeamQuota("vision", H100, guarantee, 16), TeamQuota("nlp", H100, 14, 16)]
    return ClusterState(NOW, fleet(2, 8), queued, run, quotas=quotas)


def restarted(job_id=10, **kw):
    """A 1-GPU job with a 3-day limit that a reclaim stopped once."""
    kw.setdefault("runtime", 3 * DAY)
    kw.setdefault("preemptions", 1)
    return job(job_id, "vision", kw.pop("count", 1), **kw)


def test_a_long_job_stopped_once_does_not_borrow_again():
    d = schedule(state([restarted()]))
    assert placed(d) == {}
    why = pending(d)[10]
    assert why.reason == PendingReason.RESTARTS_WITHIN_GUARANTEE
    assert "runtime limit over 24 h" in why.message
    assert "Team vision is using all 2 H100-SXM-80GB GPUs it is guaranteed." in why.message
    assert why.estimated_start is not None  # when vision's own job ends


@pytest.mark.parametrize(
    "queued",
    [
        restarted(preemptions=0),  # never stopped
        restarted(runtime=DAY),  # limit of a day at most
        restarted(checkpointable=True),  # resumes, loses nothing
        restarted(priority_class=PriorityClass.PREEMPTIBLE),  # scavenger work
        restarted(count=3),  # larger than the guarantee: it could not run otherwise
    ],
    ids=["never-stopped", "one-day-limit", "checkpointable", "preemptible-class", "too-large"],
)
def test_others_still_borrow(queued):
    d = schedule(state([queued]))
    assert list(placed(d)) == [10]
    assert d.placements[0].over_quota


def test_within_the_guarantee_it_starts():
    d = schedule(state([restarted()], vision_holds=1))
    assert list(placed(d)) == [10]
    assert not d.placements[0].over_quota


def test_the_teams_other_jobs_borrow_past_it():
    """The restarted job waits; a fresh job of the same shape behind it borrows."""
    d = schedule(state([restarted(age=600), restarted(11, preemptions=0, age=60)]))
    assert list(placed(d)) == [11]
    assert pending(d)[10].reason == PendingReason.RESTARTS_WITHIN_GUARANTEE


def test_the_limit_is_a_setting():
    config = dataclasses.replace(SchedulerConfig(), reborrow_max_runtime_seconds=7 * DAY)
    assert list(placed(schedule(state([restarted()]), config=config))) == [10]


def rows_of(result) -> dict:
    return {row[0]: dict(zip(JOB_COLUMNS, row, strict=True)) for row in result.job_rows}


def test_replay_a_stopped_month_long_job_is_stopped_once_not_again_and_again():
    """Lender borrows all 8 GPUs of a node with month-long 1-GPU jobs; owner (guarantee 8)
    sends a 1-GPU, 1-hour job every 2 hours. Before the rule every month-long job went back
    on the borrowed GPUs after its stop and was stopped again and again; now a stopped one
    waits for room within the lender's guarantee (1 GPU) and is stopped only once."""
    gpus = parse_fleet("1x8:A")
    quotas = [TeamQuota("lender", "A", 1, 8), TeamQuota("owner", "A", 7, 8)]
    jobs = [TraceJob(k, 0, 30 * DAY, 1, "lender") for k in range(1, 9)]
    jobs += [TraceJob(100 + k, 3600 + 7200.0 * k, 3600, 1, "owner") for k in range(12 * 10)]
    rows = rows_of(simulate(jobs, gpus, quotas, "fairshare"))
    assert max(rows[k]["preemptions"] for k in range(1, 9)) == 1
    # the owner's guarantee still comes back within the reclaim delay
    waits = [rows[100 + k]["first_start"] - rows[100 + k]["submit"] for k in range(120)]
    assert max(waits) <= SchedulerConfig().preempt_min_runtime_seconds + 60
    looser = SchedulerConfig(reborrow_max_runtime_seconds=60 * DAY)
    before = rows_of(simulate(jobs, gpus, quotas, "fairshare", looser))
    assert max(before[k]["preemptions"] for k in range(1, 9)) > 1


def test_a_fresh_job_behind_it_in_its_bucket_gets_its_own_reason():
    """The two jobs share a bucket and the restarted one comes first; with no GPU free the
    fresh one waits for capacity, not for room in the guarantee (the bucket's answer is not
    the restarted job's)."""
    run = [running(1, "vision", range(2), over=False), running(2, "nlp", range(2, 16))]
    quotas = [TeamQuota("vision", H100, 2, 16), TeamQuota("nlp", H100, 14, 16)]
    queued = [restarted(age=600), restarted(11, preemptions=0, age=60)]
    d = schedule(ClusterState(NOW, fleet(2, 8), queued, run, quotas=quotas))
    assert placed(d) == {}
    assert pending(d)[10].reason == PendingReason.RESTARTS_WITHIN_GUARANTEE
    assert pending(d)[11].reason != PendingReason.RESTARTS_WITHIN_GUARANTEE
