"""A team's first job within its guarantee keeps the room it needs from the team's own later,
smaller jobs while a reclaim could start it (``Engine._hold``): otherwise a later 1-GPU job
that fits the free GPUs starts first, the team no longer has the room in its guarantee, no
reclaim runs for the big job, and a stream of the team's small jobs starves it."""

from __future__ import annotations

from apps.jobs.scheduler import SchedulerConfig, schedule
from apps.jobs.scheduler.replay import JOB_COLUMNS, TraceJob, simulate
from apps.jobs.scheduler.state import ClusterState, PendingReason, PriorityClass, TeamQuota
from apps.jobs.scheduler.team_metrics import team_metrics
from apps.jobs.scheduler.trace import parse_fleet
from tests.jobs.test_scheduler import H100, NOW, fleet, job, pending, placed, running

MIN_RUNTIME = SchedulerConfig().preempt_min_runtime_seconds


def rows_of(result) -> dict:
    return {row[0]: dict(zip(JOB_COLUMNS, row, strict=True)) for row in result.job_rows}


def test_a_stream_of_the_teams_small_jobs_no_longer_starves_its_8_gpu_job():
    """Vision (guarantee 12) runs 4 GPUs; a lender borrows 11 of the other 12 for 10 hours.
    Vision's 8-GPU job fits its unused guarantee but not the one free GPU; vision's own 1-GPU
    jobs keep coming. Each used to take a free GPU first (within the guarantee too), so the
    8-GPU job no longer fitted the guarantee, no reclaim ran for it, and it waited for the
    lender's jobs to end. Now the small jobs wait behind it, and it starts when the lender's
    jobs reach their minimum runtime."""
    gpus = parse_fleet("2x8:A")
    quotas = [TeamQuota("lender", "A", 0, 16), TeamQuota("vision", "A", 12, 12)]
    jobs = [TraceJob(k, 0, 36_000, 1, "vision") for k in range(1, 5)]
    jobs += [TraceJob(10 + k, 0, 36_000, 1, "lender") for k in range(11)]
    jobs.append(TraceJob(100, 100, 3600, 8, "vision"))
    jobs += [TraceJob(200 + k, 200 + 600.0 * k, 3600, 1, "vision") for k in range(60)]
    rows = rows_of(simulate(jobs, gpus, quotas, "fairshare"))
    big = rows[100]
    assert big["within_guarantee"]
    assert big["first_start"] - big["submit"] <= MIN_RUNTIME
    # the small jobs are not held for good: they start once the big job runs
    assert all(rows[200 + k]["first_start"] is not None for k in range(60))


def state(*, guarantee=12, lender_over=True, small=None, lent=range(4, 15)):
    """Vision runs 4 of 16 GPUs, the lender 11 1-GPU jobs (borrowed, young: ``lent``), one
    GPU is free; vision queues an 8-GPU job and, later, ``small`` (a 1-GPU job)."""
    run = [running(1, "vision", range(4), over=False)]
    run += [running(100 + g, "lender", [g], over=lender_over) for g in lent]
    quotas = [TeamQuota("vision", H100, guarantee, 16), TeamQuota("lender", H100, 0, 16)]
    queued = [job(10, "vision", 8, age=100), small or job(11, "vision", 1, age=10)]
    return ClusterState(NOW, fleet(2, 8), queued, run, quotas=quotas)


def test_the_teams_later_job_leaves_the_guarantee_room_its_first_job_needs():
    d = schedule(state())
    assert placed(d) == {}
    assert pending(d)[10].reason == PendingReason.RECLAIMING_GUARANTEE
    why = pending(d)[11]
    assert why.reason == PendingReason.TEAM_JOB_FIRST
    assert why.message.startswith("Team vision's job 10 comes first")


def test_a_later_job_of_the_preemptible_class_waits_too():
    """It goes to the fair-share pass only, where it would fill the guarantee as well. Two
    GPUs are free, one per node: the node n1 drains for the 8-GPU job (its GPU is held back
    from that pass), the free GPU of n0 would take the small job."""
    small = job(11, "vision", 1, age=10, priority_class=PriorityClass.PREEMPTIBLE)
    d = schedule(state(small=small, lent=[4, 5, 6, *range(8, 15)]))
    assert placed(d) == {}
    assert pending(d)[11].reason == PendingReason.TEAM_JOB_FIRST


def test_a_later_job_runs_where_the_guarantee_has_room_for_both():
    assert placed(schedule(state(guarantee=13))) == {11: (15,)}


def test_nothing_is_kept_back_when_no_reclaim_could_start_the_first_job():
    """The lender's GPUs are not preemptible: the 8-GPU job waits for work to end either way,
    and the free GPU is not left idle for it."""
    assert placed(schedule(state(lender_over=False))) == {11: (15,)}


def test_the_replay_measures_how_long_a_waiting_job_had_the_unused_guarantee():
    """Y is within vision's guarantee at submission, but vision's X, ahead of it, waits for
    2 of the 4 GPUs and then runs in them (the reclaim of the lender's job lands at its
    minimum runtime): Y never has the room beside X, and starts when X ends. Its guarantee
    wait counts from submission to start, its time in the room only what the guarantee had
    for it after X's share: none."""
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("lender", "A", 0, 4), TeamQuota("vision", "A", 4, 4)]
    jobs = [
        TraceJob(1, 0, 10_000, 4, "lender"),
        TraceJob(2, 100, 600, 2, "vision"),  # X
        TraceJob(3, 200, 600, 4, "vision"),  # Y
    ]
    result = simulate(jobs, gpus, quotas, "fairshare")
    rows = rows_of(result)
    x, y = rows[2], rows[3]
    assert x["first_start"] == MIN_RUNTIME and x["guarantee_room_wait"] == MIN_RUNTIME - 100
    assert y["within_guarantee"] and y["first_start"] == MIN_RUNTIME + 600
    assert y["guarantee_room_wait"] == 0.0  # not its 2,200 s wait
    metrics = team_metrics(result, quotas)
    assert metrics.teams["vision"].room_wait_jobs == 1
    assert metrics.room_wait_max == MIN_RUNTIME - 100
    assert metrics.teams["lender"].room_wait_jobs == 0


def test_of_a_teams_backlog_only_its_first_job_has_the_room_until_it_starts():
    """The lender's 4 GPUs fill the node; vision (guarantee 4) queues two 4-GPU jobs. Each
    fits the unused guarantee alone, but the room is the first one's until it starts (the
    reclaim, at the lender's minimum runtime); the second has it only from then on (the
    first runs in it, so not at all until the first ends), not from its own submission."""
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("lender", "A", 0, 4), TeamQuota("vision", "A", 4, 4)]
    jobs = [
        TraceJob(1, 0, 10_000, 4, "lender"),
        TraceJob(2, 100, 600, 4, "vision"),
        TraceJob(3, 200, 600, 4, "vision"),
    ]
    rows = rows_of(simulate(jobs, gpus, quotas, "fairshare"))
    first, second = rows[2], rows[3]
    assert first["within_guarantee"] and second["within_guarantee"]
    assert first["first_start"] == MIN_RUNTIME
    assert first["guarantee_room_wait"] == MIN_RUNTIME - 100
    assert second["first_start"] == MIN_RUNTIME + 600
    assert second["guarantee_room_wait"] == 0.0  # was MIN_RUNTIME - 200, as the first's
