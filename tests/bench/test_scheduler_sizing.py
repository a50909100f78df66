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


def test_the_seed_sweep_prints_each_seeds_targets_and_the_median_loss(capsys):
    import re

    from bench.scheduler import seed_sweep

    seed_sweep(400, [3, 5, 8])
    out = capsys.readouterr().out
    lost = {
        int(seed): float(share)
        for seed, share in re.findall(r"seed +(\d+) .*\| lost +([\d.]+)% ", out)
    }
    assert sorted(lost) == [3, 5, 8]
    summary = re.search(r"over 3 seeds: median ([\d.]+)%, worst ([\d.]+)%, <= 2% on (\d) of 3", out)
    assert summary is not None
    assert float(summary[1]) == sorted(lost.values())[1]
    assert float(summary[2]) == max(lost.values())
    assert int(summary[3]) == sum(share <= 2.0 for share in lost.values())
