"""Guarantee reclaim that always lands: a job within its team's unused guarantee starts within
the victims' minimum runtime (the reclaim delay), whatever the shape of the borrowed work."""

from __future__ import annotations

from apps.jobs.scheduler import SchedulerConfig
from apps.jobs.scheduler.replay import JOB_COLUMNS, TraceJob, simulate
from apps.jobs.scheduler.state import TeamQuota
from apps.jobs.scheduler.trace import parse_fleet

MIN_RUNTIME = SchedulerConfig().preempt_min_runtime_seconds


def rows_of(result) -> dict:
    return {row[0]: dict(zip(JOB_COLUMNS, row, strict=True)) for row in result.job_rows}


def test_a_gang_of_8_gets_a_whole_node_while_short_borrowed_jobs_keep_arriving():
    """Borrowed work spread over both nodes, each job younger than the minimum runtime and a
    stream more of it queued: no node ever has only preemptible victims, and every GPU that
    frees is lent again at once. The gang's node drains ahead: what runs there ends, nothing
    new starts there, and the gang starts as the last of it ends."""
    gpus = parse_fleet("2x8:A")
    quotas = [TeamQuota("lender", "A", 0, 16), TeamQuota("small", "A", 8, 8)]
    jobs = [TraceJob(k, 5.0 * k, 1500, 1, "lender") for k in range(1, 17)]
    jobs += [TraceJob(100 + k, 100.0 * k, 1500, 1, "lender") for k in range(1, 400)]
    jobs.append(TraceJob(1000, 3000, 3600, 8, "small"))
    rows = rows_of(simulate(jobs, gpus, quotas, "fairshare"))
    gang = rows[1000]
    assert gang["within_guarantee"]
    assert gang["first_start"] - gang["submit"] <= 1500  # the drained node's last job ends


def test_victims_of_several_teams_stop_together_when_their_minimum_runtime_is_up():
    """Two teams' borrowed jobs share the node the gang needs; each alone loses more than the
    gang's work allows, and nothing else happens in the trace until they end in 10 hours. The
    reclaim lands at the minimum runtime anyway (a bound picks victims, it never vetoes)."""
    gpus = parse_fleet("1x8:A")
    quotas = [TeamQuota(t, "A", 0, 8) for t in ("a", "b")] + [TeamQuota("small", "A", 8, 8)]
    jobs = [TraceJob(k, 0, 36_000, 1, "a" if k <= 4 else "b") for k in range(1, 9)]
    jobs.append(TraceJob(9, 100, 600, 8, "small"))
    result = simulate(jobs, gpus, quotas, "fairshare")
    rows = rows_of(result)
    assert rows[9]["first_start"] == MIN_RUNTIME
    assert result.preemptions == 8
    assert {rows[k]["team"] for k in range(1, 9) if rows[k]["preemptions"]} == {"a", "b"}


def test_a_multi_node_gang_collects_its_gpus_as_borrowed_work_ends():
    """A 16-GPU gang within its guarantee on 4 nodes full of young borrowed jobs: GPUs that
    free are held for it rather than lent again, and the young jobs yield once they may."""
    gpus = parse_fleet("4x8:A")
    quotas = [TeamQuota("lender", "A", 0, 32), TeamQuota("llm", "A", 16, 32)]
    jobs = [TraceJob(k, 60.0 * k, 2400 + 60 * k, 1, "lender") for k in range(1, 33)]
    jobs += [TraceJob(100 + k, 2000 + 30.0 * k, 2400, 1, "lender") for k in range(1, 100)]
    jobs.append(TraceJob(1000, 2000, 3600, 16, "llm"))
    rows = rows_of(simulate(jobs, gpus, quotas, "fairshare"))
    assert rows[1000]["first_start"] - rows[1000]["submit"] <= MIN_RUNTIME


def test_replay_wakes_up_for_a_reclaim_without_any_other_event():
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("a", "A", 2, 4), TeamQuota("b", "A", 2, 4)]
    jobs = [TraceJob(1, 0, 20_000, 4, "a"), TraceJob(2, 10, 600, 2, "b")]
    rows = rows_of(simulate(jobs, gpus, quotas, "fairshare"))
    assert rows[2]["first_start"] == MIN_RUNTIME  # not at 20,000, when job 1 would end


def test_a_gang_drains_the_node_whose_guaranteed_work_ends_first():
    """Every node holds one GPU of another team's guaranteed work (never preempted) beside
    seven borrowed GPUs, and a stream of short borrowed jobs would take any GPU that frees.
    The gang drains the node whose guaranteed job ends first: the GPU it frees is not lent
    again, the borrowed jobs there stop, and the gang starts then."""
    gpus = parse_fleet("2x8:A")
    quotas = [
        TeamQuota("owner", "A", 2, 2),
        TeamQuota("lender", "A", 0, 16),
        TeamQuota("small", "A", 8, 8),
    ]
    jobs = [TraceJob(1, 0, 5 * 3600, 1, "owner"), TraceJob(2, 1, 2 * 3600, 1, "owner")]
    jobs += [TraceJob(10 + k, 0, 36_000, 1, "lender") for k in range(7)]  # beside job 1
    jobs += [TraceJob(20 + k, 1, 36_000, 1, "lender") for k in range(7)]  # beside job 2
    jobs += [TraceJob(100 + k, 60.0 * k, 1200, 1, "lender") for k in range(1, 400)]
    jobs.append(TraceJob(1000, 100, 3600, 8, "small"))
    rows = rows_of(simulate(jobs, gpus, quotas, "fairshare"))
    assert rows[2]["end"] == 7201
    assert rows[1000]["first_start"] == 7201


def test_a_gang_of_any_model_gets_a_node_drained_ahead_on_a_fleet_of_two_models():
    """As the first test, on one node of each of two models, and the gang accepts any model:
    the node of either model that will have room soonest drains for it (nothing borrowed
    starts there), and it starts when the last job there ends, with nothing preempted."""
    gpus = parse_fleet("1x8:A,1x8:B")
    quotas = [TeamQuota("lender", None, 0, 16), TeamQuota("small", None, 8, 8)]
    jobs = [TraceJob(k, 5.0 * k, 1500, 1, "lender") for k in range(1, 17)]
    jobs += [TraceJob(100 + k, 100.0 * k, 1500, 1, "lender") for k in range(1, 400)]
    jobs.append(TraceJob(1000, 3000, 3600, 8, "small"))
    result = simulate(jobs, gpus, quotas, "fairshare")
    gang = rows_of(result)[1000]
    assert gang["within_guarantee"]
    assert gang["first_start"] - gang["submit"] <= 1500
    assert result.preemptions == 0


def test_patience_counts_from_when_the_job_comes_within_its_guarantee_not_its_submission():
    """small's 8-GPU job waits behind its own team's 4-GPU job (over its guarantee until that
    ends at 10,000 s) beside a borrowed job that has run for hours. Once within its guarantee
    it waits its patience first (from 10,000 s, not from its submission at 100 s): the
    borrowed job ends by itself at 10,301 s and nothing is thrown away. Rebuilding the state
    at every event (as the live portal does) decides the same: the clock travels with the
    queued job."""
    gpus = parse_fleet("1x8:A")
    quotas = [TeamQuota("small", "A", 8, 8), TeamQuota("lender", "A", 0, 8)]
    jobs = [
        TraceJob(1, 0, 10_000, 4, "small"),
        TraceJob(2, 1, 10_300, 4, "lender"),
        TraceJob(3, 100, 3600, 8, "small"),
    ]
    for incremental in (True, False):
        result = simulate(jobs, gpus, quotas, "fairshare", incremental=incremental)
        rows = rows_of(result)
        assert not rows[3]["within_guarantee"]  # at its submission
        assert result.preemptions == 0
        assert rows[3]["first_start"] == 10_301


def test_a_borrowed_gang_stops_once_the_patience_since_the_job_came_within_is_up():
    """As above, but the borrowed job would run on for hours: it stops when the patience
    counted from 10,000 s is up."""
    gpus = parse_fleet("1x8:A")
    quotas = [TeamQuota("small", "A", 8, 8), TeamQuota("lender", "A", 0, 8)]
    jobs = [
        TraceJob(1, 0, 10_000, 4, "small"),
        TraceJob(2, 1, 100_000, 4, "lender"),
        TraceJob(3, 100, 3600, 8, "small"),
    ]
    patience = SchedulerConfig().reclaim_patience_seconds
    for incremental in (True, False):
        rows = rows_of(simulate(jobs, gpus, quotas, "fairshare", incremental=incremental))
        assert rows[2]["preemptions"] == 1
        assert rows[3]["first_start"] == 10_000 + patience
