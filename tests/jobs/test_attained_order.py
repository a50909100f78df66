"""Duration-blind order inside a team (fairshare): least attained service first, in Tiresias'
discretized queues, then the job's turn. A preempted job that had run for hours goes behind
its team's fresh work instead of taking borrowed GPUs back at once."""

from __future__ import annotations

from apps.jobs.scheduler import SchedulerConfig, schedule
from apps.jobs.scheduler.config import TIRESIAS_BOUNDS, attained_level, queue_order_key
from apps.jobs.scheduler.replay import JOB_COLUMNS, TraceJob, simulate
from apps.jobs.scheduler.state import ClusterState, GpuInfo, QueuedJob, TeamQuota
from apps.jobs.scheduler.trace import parse_fleet

HOUR = 3600.0


def test_attained_levels_follow_the_tiresias_bounds():
    assert attained_level(0.0) == 0
    assert attained_level(TIRESIAS_BOUNDS[0] - 1) == 0
    assert attained_level(TIRESIAS_BOUNDS[0]) == 1
    assert attained_level(TIRESIAS_BOUNDS[-1] * 10) == len(TIRESIAS_BOUNDS)


def test_a_fresh_job_goes_before_an_older_one_that_already_ran_for_hours():
    gpus = [GpuInfo(0, "n0", "A", "n0")]
    old = QueuedJob(1, "t", None, 1, 4 * HOUR, 0.0, attained=3 * HOUR)
    fresh = QueuedJob(2, "t", None, 1, 4 * HOUR, 500.0)
    state = ClusterState(1000.0, gpus, [old, fresh], [], [], [TeamQuota("t", "A", 1, 1)], {})
    decision = schedule(state, "fairshare", SchedulerConfig())
    assert [p.job_id for p in decision.placements] == [2]
    order = queue_order_key("fairshare")
    assert sorted([old, fresh], key=order) == [fresh, old]
    # a job that ran less than the first bound keeps its turn
    brief = QueuedJob(3, "t", None, 1, 4 * HOUR, 0.0, attained=0.5 * HOUR)
    assert sorted([fresh, brief], key=order) == [brief, fresh]


def test_a_preempted_long_job_does_not_restart_ahead_of_its_teams_short_work():
    """Team ``big`` borrows the second GPU for a 100-hour job; ``small`` reclaims it after two
    hours. A short job of ``big`` has waited since hour 1. When ``small``'s job ends, the GPU
    goes to that short job, not back to the job that was stopped after two hours (it would
    hold the GPU for 100 hours more, in submit order)."""
    gpus = parse_fleet("1x2:A")
    quotas = [TeamQuota("big", "A", 1, 2), TeamQuota("small", "A", 1, 2)]
    jobs = [
        TraceJob(1, 0, 100 * HOUR, 1, "big"),
        TraceJob(2, 0, 100 * HOUR, 1, "big"),
        TraceJob(3, 1 * HOUR, 600, 1, "big"),
        TraceJob(4, 2 * HOUR, HOUR, 1, "small"),
    ]
    result = simulate(jobs, gpus, quotas, "fairshare")
    rows = {row[0]: dict(zip(JOB_COLUMNS, row, strict=True)) for row in result.job_rows}
    stopped = 1 if rows[1]["preemptions"] else 2
    assert rows[stopped]["preemptions"] == 1
    assert rows[3]["first_start"] == rows[4]["end"]
    assert rows[stopped]["final_start"] >= rows[3]["end"]
