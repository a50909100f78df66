"""Benchmark the job scheduler.

(a) One cycle: 10,000 queued jobs on 2,000 GPUs (250 nodes x 8, two models, NVLink domains of
    two nodes), 20 teams, some running jobs and bookings. Times ``schedule(fairshare)`` against
    a naive first-fit FIFO pass written here (scan every free GPU for every job) and prints the
    ratio.
(b) Replays: each shared trace and a 100,000-job trace resampled from the Alibaba pod list with
    ``random.Random(42)``; prints wall time, jobs/s and the fairshare / fifo / sjf table.

Run: .venv/bin/python bench/scheduler.py [--skip-replay] [--replay-jobs N]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.jobs.scheduler import schedule  # noqa: E402
from apps.jobs.scheduler.state import (  # noqa: E402
    Booking,
    ClusterState,
    GpuInfo,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
)

TRACES = Path(os.environ.get("TRACE_DIR", "/work/shared/data/traces"))


def build_state(seed: int = 7) -> ClusterState:
    rng = random.Random(seed)
    models = ["H100-SXM-80GB", "L40S-48GB"]
    gpus = []
    for n in range(250):
        model = models[n % 2]
        for i in range(8):
            gpus.append(GpuInfo(n * 8 + i, f"node-{n:03d}", model, f"nvl-{n // 2}"))
    teams = [f"team{t:02d}" for t in range(20)]
    quotas = [TeamQuota(t, m, 40, 120) for t in teams for m in models]
    now = 1_000_000.0
    running = []
    gid = 0
    for j in range(150):  # 600 GPUs busy
        g = gpus[gid : gid + 4]
        gid += 4
        running.append(
            RunningJob(
                j,
                teams[j % 20],
                g[0].model,
                tuple(x.gpu_id for x in g),
                now - rng.uniform(0, 3600),
                7200,
                PriorityClass.OVER_QUOTA,
                over_quota=j % 3 == 0,
            )
        )
    bookings = [
        Booking(1, teams[0], gpus[-1 - i].gpu_id, now + 1800, now + 7200) for i in range(64)
    ]
    queued = [
        QueuedJob(
            100_000 + j,
            teams[rng.randrange(20)],
            rng.choice(models + [None]),
            rng.choice([1, 1, 1, 2, 4, 8, 16]),
            rng.choice([600.0, 3600.0, 14400.0]),
            now - rng.uniform(0, 86400),
            same_node=rng.random() < 0.8,
        )
        for j in range(10_000)
    ]
    for k, job in enumerate(queued):
        if job.gpu_count > 8 and job.same_node:
            queued[k] = dataclasses.replace(job, same_node=False)
    return ClusterState(now, gpus, queued, running, bookings, quotas, {})


def naive_fifo(state: ClusterState) -> int:
    """First-fit in submit order, scanning all GPUs for each job (the baseline)."""
    busy = {g for r in state.running for g in r.gpu_ids}
    busy |= {b.gpu_id for b in state.bookings if b.start <= state.now < b.end}
    placed = 0
    for job in sorted(state.queued, key=lambda j: j.submitted_at):
        free = [
            g.gpu_id
            for g in state.gpus
            if g.gpu_id not in busy and job.gpu_model in (None, g.model)
        ]
        if len(free) >= job.gpu_count:
            busy.update(free[: job.gpu_count])
            placed += 1
    return placed


def bench_cycle() -> None:
    state = build_state()
    t0 = time.perf_counter()
    decision = schedule(state, "fairshare")
    t_fs = time.perf_counter() - t0
    t0 = time.perf_counter()
    placed = naive_fifo(state)
    t_naive = time.perf_counter() - t0
    print("(a) one cycle: 10,000 queued jobs, 2,000 GPUs, 20 teams")
    print(
        f"  schedule(fairshare): {t_fs * 1000:8.1f} ms  placed {len(decision.placements)}, "
        f"pending {len(decision.pending)}, preemptions {len(decision.preemptions)}"
    )
    print(f"  naive first-fit FIFO: {t_naive * 1000:8.1f} ms  placed {placed}")
    print(f"  ratio naive / schedule: {t_naive / t_fs:.1f}x")


def bench_replay(max_jobs: int) -> None:
    from apps.jobs.scheduler.replay import format_table, simulate
    from apps.jobs.scheduler.trace import (
        default_quotas,
        load_alibaba_pods,
        parse_fleet,
        resample,
    )

    pods = TRACES / "alibaba_openb_pod_list_default.csv"
    if not pods.exists():
        print(f"(b) skipped: {pods} not found")
        return
    gpus = parse_fleet("16x8:any")
    loaded = load_alibaba_pods(pods)
    cases = [("alibaba openb pod list", loaded.jobs)]
    if max_jobs:
        cases.append((f"{max_jobs:,}-job resample (seed 42)", resample(loaded.jobs, max_jobs, 42)))
    for label, jobs in cases:
        quotas = default_quotas(gpus, sorted({j.team for j in jobs}))
        print(f"(b) replay {label}: {len(jobs):,} jobs on {len(gpus)} GPUs")
        results = {}
        for policy in ("fairshare", "fifo", "sjf"):
            t0 = time.perf_counter()
            results[policy] = simulate(jobs, gpus, quotas, policy)
            wall = time.perf_counter() - t0
            print(f"  {policy:9s} wall {wall:7.1f} s  {len(jobs) / wall:9.0f} jobs/s")
        print(format_table(results))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-replay", action="store_true")
    parser.add_argument("--replay-jobs", type=int, default=100_000)
    args = parser.parse_args()
    bench_cycle()
    if not args.skip_replay:
        bench_replay(args.replay_jobs)


if __name__ == "__main__":
    main()
