"""What teams care about, checked by hand on small traces: guarantee wait of within-guarantee
jobs, sharing incentive against the team's guaranteed GPUs alone, finish-time fairness rho."""

from __future__ import annotations

import pytest

from apps.jobs.scheduler.replay import JOB_COLUMNS, TraceJob, simulate
from apps.jobs.scheduler.state import TeamQuota
from apps.jobs.scheduler.team_metrics import (
    _Job,
    alone_jct,
    compare_teams,
    format_team_metrics,
    team_metrics,
)
from apps.jobs.scheduler.trace import parse_fleet


def _alone(specs, pool=4):
    jobs = [_Job(k, t, d, g, (("t", "A"),), None, None, False) for k, (t, g, d) in specs.items()]
    return alone_jct(jobs, {("t", "A"): pool})


def test_alone_replay_is_greedy_fifo_on_the_guaranteed_gpus():
    # 4 GPUs: A takes all; B and C queue; when A ends B (older) starts first, then C fits too.
    assert _alone({1: (0, 4, 100), 2: (0, 2, 50), 3: (10, 1, 10)}) == {1: 100, 2: 150, 3: 100}
    # Greedy: C fits beside A while B does not, so C goes first; B starts when A ends.
    assert _alone({1: (0, 3, 100), 2: (1, 2, 100), 3: (2, 1, 10)}) == {1: 100, 2: 199, 3: 10}


def test_an_any_model_job_runs_alone_on_whichever_guaranteed_model_has_room():
    jobs = [
        _Job(1, 0, 100, 2, (("t", "A"),), None, None, False),
        _Job(2, 0, 100, 2, (("t", "A"), ("t", "B")), None, None, False),
    ]
    assert alone_jct(jobs, {("t", "A"): 2, ("t", "B"): 2}) == {1: 100, 2: 100}


def test_within_guarantee_counts_the_running_gpus_of_the_jobs_model_only():
    gpus = parse_fleet("1x4:A,1x4:B")
    quotas = [TeamQuota("a", "A", 2, 4), TeamQuota("a", "B", 2, 4)]
    jobs = [
        TraceJob(1, 0, 3600, 2, "a", "A"),
        TraceJob(2, 10, 600, 1, "a", "A"),  # 2 + 1 > 2 on A
        TraceJob(3, 20, 600, 2, "a", "B"),  # nothing runs on B yet
        TraceJob(4, 30, 600, 1, "a", None),
    ]
    result = simulate(jobs, gpus, quotas, "fifo")
    rows = {row[0]: dict(zip(JOB_COLUMNS, row, strict=True)) for row in result.job_rows}
    assert [rows[k]["within_guarantee"] for k in (1, 2, 3)] == [True, False, True]
    # job 4 arrives with A at 3 of 2 and B at 2 of 2: no model has room in the guarantee
    assert rows[4]["within_guarantee"] is False
    assert rows[3]["model"] == "B" and rows[4]["model"] is None


def test_guarantee_wait_sharing_incentive_and_rho_of_a_small_trace():
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("a", "A", 2, 4), TeamQuota("b", "A", 2, 4)]
    jobs = [
        TraceJob(1, 0, 3700, 4, "a"),  # borrows b's guarantee (fifo: no preemption)
        TraceJob(2, 10, 600, 2, "b"),  # within b's guarantee; waits until 3700, ends 4300
        TraceJob(3, 5000, 100, 1, "b"),  # within; starts at once
    ]
    metrics = team_metrics(simulate(jobs, gpus, quotas, "fifo"), quotas)
    a, b = metrics.teams["a"], metrics.teams["b"]
    assert (a.within_guarantee_jobs, a.compared_jobs, a.jct_alone, a.worse_off) == (
        0,
        0,
        None,
        False,
    )  # its only job is larger than its guarantee: nothing to compare
    assert b.within_guarantee_jobs == 2 and b.guaranteed == 2
    assert b.guarantee_wait_p50 == 0 and b.guarantee_wait_p99 == 3690
    assert b.guarantee_wait_max == 3690 and b.guarantee_wait_late_share == 0.5
    # shared JCT (4290 + 100) / 2 against alone on its 2 GPUs (600 + 100) / 2: worse off
    assert b.jct_shared == 2195 and b.jct_alone == 350 and b.worse_off
    assert b.worst_rho == pytest.approx(4290 / 600) and b.rho_late_share == 0.5
    assert metrics.worse_off_teams == ("b",) and metrics.within_guarantee_jobs == 2
    assert metrics.guarantee_wait_p99 == 3690 and metrics.guarantee_wait_late_share == 0.5
    assert metrics.worst_rho == pytest.approx(4290 / 600)
    text = format_team_metrics({"fifo": metrics})
    assert "teams worse off than alone 1 (b)" in text and "p99 61.5 min" in text
    assert metrics.as_dict()["teams"]["b"]["worse_off"] is True


def test_a_team_no_worse_than_alone_within_the_half_hour_margin():
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("a", "A", 2, 4), TeamQuota("b", "A", 2, 4)]
    jobs = [TraceJob(1, 0, 1000, 4, "a"), TraceJob(2, 10, 600, 2, "b")]
    b = team_metrics(simulate(jobs, gpus, quotas, "fifo"), quotas).teams["b"]
    # waits 990 s: shared 1590 s <= alone 600 s + 1800 s
    assert b.jct_shared == 1590 and not b.worse_off and b.guarantee_wait_late_share == 0


def test_compare_teams_says_who_a_change_leaves_better_or_worse_off():
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("a", "A", 2, 4), TeamQuota("b", "A", 2, 4)]
    jobs = [TraceJob(1, 0, 4000, 4, "a", checkpointable=True), TraceJob(2, 2000, 600, 2, "b")]
    fifo = team_metrics(simulate(jobs, gpus, quotas, "fifo"), quotas)
    # fairshare gives b its guarantee back: a's over-quota job, past its minimum runtime, is
    # checkpointed away at 2000, b runs 2000-2600, a resumes and ends at 4600 instead of 4000.
    fair = team_metrics(simulate(jobs, gpus, quotas, "fairshare"), quotas)
    rows = compare_teams(fifo, fair)
    assert rows["b"]["change"] == "better" and rows["a"]["change"] == "worse"
    assert rows["b"]["jct_before_h"] == pytest.approx(2600 / 3600)
    assert rows["b"]["jct_after_h"] == pytest.approx(600 / 3600)
    assert rows["a"]["jct_after_h"] == pytest.approx(4600 / 3600)
    assert rows["b"]["worse_off_than_alone_before"] is True
    assert rows["b"]["worse_off_than_alone_after"] is False
    assert rows["b"]["guarantee_wait_p99_before_h"] == pytest.approx(2000 / 3600)
    assert rows["b"]["guarantee_wait_p99_after_h"] == 0
    assert compare_teams(fifo, fifo)["a"]["change"] == "same"
