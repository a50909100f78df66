"""Benchmark power saving in the trace replayer: capacity that follows demand.

In one run, for the synthetic trace of ``bench/tracegen.py`` (84,000 jobs on 64 x 8 GPUs) and
the Alibaba openb pod list (on the 8-GPU nodes it loads to about 75 %, as ``bench/scheduler.py``
sizes it), replays fairshare always on (the baseline) and with power saving (30 min idle,
5 min resume, a warm reserve of one node = 8 GPUs, at most 4 power-downs per node a day, the
live defaults for minimum on/off times), and prints for each trace the wall time of both and
their ratio, then each target met or missed with its number:

* share of the baseline's fully idle node-hours powered off >= 50 %;
* average JCT within 2 % of always on;
* guarantee wait p99 within 5 min of always on;
* bookings started late: 0 (the replay has no bookings; said so);
* no node powered down more than 4 times in a day.

Run: .venv/bin/python bench/power.py [--replay-jobs N] [--seed S] [--idle-watts W]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.fleet.power_rules import PowerSaving  # noqa: E402
from apps.jobs.scheduler.replay import simulate  # noqa: E402
from apps.jobs.scheduler.team_metrics import team_metrics  # noqa: E402
from apps.jobs.scheduler.trace import default_quotas, load_alibaba_pods, parse_fleet  # noqa: E402

TRACES = Path(os.environ.get("TRACE_DIR", "/work/shared/data/traces"))
SAVING = PowerSaving(idle_seconds=1800, resume_seconds=300, warm_gpus=8, max_cycles_per_day=4)
OFF_SHARE_TARGET = 0.50
JCT_TARGET = 1.02
WAIT_P99_DELTA_TARGET = 300.0
CYCLES_TARGET = 4


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def power_case(label: str, jobs, gpus, idle_watts: float) -> list[bool]:
    """Always on against power saving on one trace; prints both and the targets. Returns
    whether each target was met."""
    quotas = default_quotas(gpus, sorted({j.team for j in jobs}))
    nodes = len({g.node for g in gpus})
    print(f"{label}: {len(jobs):,} jobs on {nodes} nodes / {len(gpus)} GPUs", flush=True)
    base, base_wall = timed(simulate, jobs, gpus, quotas, "fairshare")
    saved, saved_wall = timed(
        simulate, jobs, gpus, quotas, "fairshare", power_saving=SAVING, idle_watts=idle_watts
    )
    print(
        f"  wall: always on {base_wall:6.2f} s, power saving {saved_wall:6.2f} s "
        f"(ratio {saved_wall / base_wall:.2f}x)"
    )
    wait_base = team_metrics(base, quotas).guarantee_wait_p99
    wait_saved = team_metrics(saved, quotas).guarantee_wait_p99
    share = saved.node_hours_off / base.idle_node_hours if base.idle_node_hours else 0.0
    print(
        f"  node-hours: {base.makespan / 3600 * nodes:,.0f} in all, fully idle always on "
        f"{base.idle_node_hours:,.0f} (power-saving run: {saved.idle_node_hours:,.0f}), "
        f"off {saved.node_hours_off:,.0f}; energy saved {saved.energy_saved_kwh:,.0f} kWh at "
        f"{idle_watts:.0f} W; power-downs {saved.power_cycles:,}"
    )
    print(
        f"  avg JCT {base.avg_jct / 3600:.3f} h -> {saved.avg_jct / 3600:.3f} h; avg wait "
        f"{base.avg_wait / 3600:.3f} h -> {saved.avg_wait / 3600:.3f} h; guarantee wait p99 "
        f"{wait_base / 60:.1f} -> {wait_saved / 60:.1f} min; finished {base.finished:,} / "
        f"{saved.finished:,}"
    )
    jct_ratio = saved.avg_jct / base.avg_jct if base.avg_jct else 1.0
    cells = [
        (f"off {share:.1%} of idle node-h (>= {OFF_SHARE_TARGET:.0%})", share >= OFF_SHARE_TARGET),
        (f"avg JCT {jct_ratio:.4f}x (<= {JCT_TARGET})", jct_ratio <= JCT_TARGET),
        (
            f"guarantee wait p99 {(wait_saved - wait_base) / 60:+.1f} min (<= +5)",
            wait_saved - wait_base <= WAIT_P99_DELTA_TARGET,
        ),
        (f"bookings late {saved.bookings_late} ({saved.bookings_late_reason})",
         saved.bookings_late == 0),
        (f"max power-downs per node-day {saved.max_cycles_per_node_day} (<= {CYCLES_TARGET})",
         saved.max_cycles_per_node_day <= CYCLES_TARGET),
    ]  # fmt: skip
    for text, ok in cells:
        print(f"    {'met   ' if ok else 'MISSED'} {text}")
    return [ok for _, ok in cells]


def main() -> None:
    from bench.tracegen import generate

    parser = argparse.ArgumentParser()
    parser.add_argument("--replay-jobs", type=int, default=84_000)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--idle-watts", type=float, default=400.0)
    args = parser.parse_args()
    print(
        f"power saving: idle {SAVING.idle_seconds / 60:.0f} min, resume "
        f"{SAVING.resume_seconds / 60:.0f} min, warm reserve {SAVING.warm_gpus} GPUs, at most "
        f"{SAVING.max_cycles_per_day} power-downs a day, on >= {SAVING.min_on_seconds / 60:.0f} "
        f"min, off >= {SAVING.min_off_seconds / 60:.0f} min"
    )
    met: list[bool] = []
    jobs, summary = generate(jobs=args.replay_jobs, seed=args.seed)
    print(f"synthetic trace (bench/tracegen.py, seed {args.seed}): {summary}")
    met += power_case("synthetic trace", jobs, parse_fleet("64x8:GPU"), args.idle_watts)
    pods = TRACES / "alibaba_openb_pod_list_default.csv"
    if pods.exists():
        pod_jobs = load_alibaba_pods(pods).jobs
        # The fleet bench/scheduler.py replays it on: about 75 % loaded on average.
        span = max(j.submit for j in pod_jobs) - min(j.submit for j in pod_jobs)
        asked = sum(j.gpus * j.duration for j in pod_jobs)
        nodes = max(1, round(asked / (span * 8 * 0.75)))
        met += power_case(
            "Alibaba openb pod list", pod_jobs, parse_fleet(f"{nodes}x8:GPU"), args.idle_watts
        )
    else:
        print(f"Alibaba pod list skipped: {pods} not found")
    print(f"targets met: {sum(met)}/{len(met)}")


if __name__ == "__main__":
    main()
