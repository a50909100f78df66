"""The scheduler bench sizes the Alibaba fleet on the trace's average load or on its busy last
month (jobs that arrived earlier and still run count in the month)."""

from apps.jobs.scheduler.trace_jobs import TraceJob
from bench.scheduler import average_nodes, busy_month_nodes

DAY = 86400.0


def test_a_trace_busy_in_its_last_month_gets_more_nodes_on_that_month_than_on_average():
    jobs = [
        TraceJob(1, 0.0, 150 * DAY, 6, "LS"),  # runs through the whole trace
        TraceJob(2, 120 * DAY, 30 * DAY, 12, "BE"),  # the busy month
        TraceJob(3, 150 * DAY, 1.0, 1, "BE"),  # the last arrival: the month ends here
    ]
    # (6 x 150 + 12 x 30) GPU-days over 150 days at 75 % of 8-GPU nodes: 1.4
    assert average_nodes(jobs) == 1
    # 18 GPUs busy throughout the last 30 days at 75 % of 8-GPU nodes: 3
    assert busy_month_nodes(jobs) == 3
    assert busy_month_nodes(jobs, days=10) == 3  # as busy in its last 10 days
