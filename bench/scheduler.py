"""Benchmark the job scheduler.

(a) One cycle: 10,000 queued jobs on 2,000 GPUs (250 nodes x 8, two models, NVLink domains of
    two nodes), 20 teams, some running jobs and bookings. Times ``schedule(fairshare)`` against
    a naive first-fit FIFO pass written here (scan every free GPU for every job) and prints the
    ratio.
(b) Replays the loaded synthetic trace of ``bench/tracegen.py`` (84,000 jobs, 15 teams, three
    of them small) on 64 x 8 GPUs, and (c) the Alibaba openb pod list on the number of 8-GPU
    nodes it loads to about 75 % on average over its 149 days (teams = its QoS classes), and
    with ``--alibaba-fleet busy-month`` (or ``both``) on the nodes its last 30 days load to
    about 75 % (90 % of its pods arrive then: the average sizing runs that month about 2x
    overloaded). For each: the floor (a
    minimal heap-based FIFO simulation written here, fastest of three runs); every policy
    (fairshare with each spare order and with borrowed work packed apart, fifo, sjf told the
    runtime limits users give) and the
    oracle SJF (told the true durations) with wall and CPU time and their ratios to the floor;
    the metrics table; what each team sees under fairshare (guarantee wait, average JCT shared
    vs alone on its guaranteed GPUs, finish-time fairness rho; Jain in the table as context);
    and per policy each target met or missed, with its number: guarantee wait p99 <= 45 min,
    no team worse off than alone, average JCT <= 1.5 x the oracle SJF, preemptions <= 0.1 per
    job, GPU-hours lost <= 2 %, wall time <= 2 x the floor (the aim). On the Alibaba trace
    also what a duration-blind ideal reaches (preemptive Tiresias LAS, preemption free).

Run: .venv/bin/python bench/scheduler.py [--skip-cycle] [--skip-replay] [--replay-jobs N]
    [--seed S] [--policies fairshare,...] [--alibaba-fleet average|busy-month|both]
    [--seeds 1,2,...]
(``--seeds``: (d) instead of (b) and (c): the default policy on the synthetic trace of each
seed, its targets per seed and the median and worst GPU-hours lost, which a few gangs
stopped late decide on any one seed.)
(``--policies``: the policies of ``POLICIES`` to replay, beside the oracle SJF, which always
runs; a short run: ``--skip-cycle --replay-jobs 30000 --policies fairshare``.)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
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


def build_state(seed: int = 7, *, gpus_total: int = 2_000, jobs: int = 10_000) -> ClusterState:
    rng = random.Random(seed)
    models = ["H100-SXM-80GB", "L40S-48GB"]
    gpus = []
    for n in range(gpus_total // 8):
        model = models[n % 2]
        for i in range(8):
            gpus.append(GpuInfo(n * 8 + i, f"node-{n:03d}", model, f"nvl-{n // 2}"))
    teams = [f"team{t:02d}" for t in range(20)]
    quotas = [TeamQuota(t, m, 40, 120) for t in teams for m in models]
    now = 1_000_000.0
    running = []
    gid = 0
    for j in range(gpus_total * 3 // 40):  # 30 % of the GPUs busy
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
        for j in range(jobs)
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


def bench_cycle(gpus: int = 2_000, jobs: int = 10_000) -> None:
    state = build_state(gpus_total=gpus, jobs=jobs)
    t0 = time.perf_counter()
    decision = schedule(state, "fairshare")
    t_fs = time.perf_counter() - t0
    t0 = time.perf_counter()
    placed = naive_fifo(state)
    t_naive = time.perf_counter() - t0
    print(f"(a) one cycle: {jobs:,} queued jobs, {gpus:,} GPUs, 20 teams")
    print(
        f"  schedule(fairshare): {t_fs * 1000:8.1f} ms  placed {len(decision.placements)}, "
        f"pending {len(decision.pending)}, preemptions {len(decision.preemptions)}"
    )
    print(f"  naive first-fit FIFO: {t_naive * 1000:8.1f} ms  placed {placed}")
    print(f"  ratio naive / schedule: {t_naive / t_fs:.1f}x")
    print(f"  target one live cycle < 1 s: {t_fs:.3f} s  {'met' if t_fs < 1 else 'MISSED'}")


def fifo_floor(jobs, nodes: int, per_node: int) -> tuple[float, float]:
    """The floor: a minimal heap-based FIFO first-fit replay (free GPU counts per node, a heap
    of end times, whole-job gangs, nothing else). Returns (wall seconds, average JCT)."""
    import heapq

    t0 = time.perf_counter()
    free = [per_node] * nodes
    total_free = nodes * per_node
    ends: list = []
    queue: list = []
    arrivals = sorted(jobs, key=lambda j: (j.submit, j.job_id))
    i, n, jct_sum = 0, len(arrivals), 0.0
    while i < n or ends:
        now = min(
            arrivals[i].submit if i < n else float("inf"), ends[0][0] if ends else float("inf")
        )
        while ends and ends[0][0] <= now:
            _, _, taken = heapq.heappop(ends)
            for node, k in taken:
                free[node] += k
                total_free += k
        while i < n and arrivals[i].submit <= now:
            queue.append(arrivals[i])
            i += 1
        if not total_free or not queue:
            continue
        kept = []
        for pos, job in enumerate(queue):
            if total_free == 0:
                kept.extend(queue[pos:])
                break
            if job.gpus > total_free:
                kept.append(job)
                continue
            taken = []
            if job.gpus <= per_node:
                for node in range(nodes):
                    if free[node] >= job.gpus:
                        taken = [(node, job.gpus)]
                        break
            else:
                need = job.gpus
                for node in sorted(range(nodes), key=lambda x: -free[x]):
                    k = min(need, free[node])
                    if k:
                        taken.append((node, k))
                        need -= k
                    if not need:
                        break
            if not taken:
                kept.append(job)
                continue
            for node, k in taken:
                free[node] -= k
                total_free -= k
            heapq.heappush(ends, (now + job.duration, job.job_id, taken))
            jct_sum += now + job.duration - job.submit
        queue = kept
    return time.perf_counter() - t0, jct_sum / max(1, n)


def ideal_las(jobs, nodes: int, per_node: int) -> float:
    """The average JCT a duration-blind scheduler could reach at best: preemptive least
    attained service in Tiresias' queues (``TIRESIAS_BOUNDS``, then submit order), with
    preemption free (every job resumes where it stopped), no teams, no quotas, a gang on one
    node (gangs larger than a node are left out). Unlike the oracle SJF it never knows a
    duration; unlike the engine it may stop any job at any time at no cost."""
    import bisect
    import math

    from apps.jobs.scheduler.config import TIRESIAS_BOUNDS as bounds

    jobs = sorted((j for j in jobs if j.gpus <= per_node), key=lambda j: (j.submit, j.job_id))
    left = {j.job_id: j.duration for j in jobs}
    attained = dict.fromkeys(left, 0.0)
    active, running = {}, {}  # job id -> job; running job id -> node
    i, n, now, jct_sum = 0, len(jobs), jobs[0].submit if jobs else 0.0, 0.0
    while i < n or active:
        t = jobs[i].submit if i < n else math.inf
        for jid in running:  # next end or next crossing of a queue bound
            t = min(t, now + left[jid])
            level = bisect.bisect_right(bounds, attained[jid])
            if level < len(bounds):
                t = min(t, now + (bounds[level] - attained[jid]) / active[jid].gpus + 1e-6)
        for jid in running:
            left[jid] -= t - now
            attained[jid] += (t - now) * active[jid].gpus
        now = t
        for jid in [x for x in running if left[x] <= 1e-6]:
            jct_sum += now - active.pop(jid).submit
            del running[jid]
        while i < n and jobs[i].submit <= now:
            active[jobs[i].job_id] = jobs[i]
            i += 1
        free, placed = [per_node] * nodes, {}
        for job in sorted(
            active.values(),
            key=lambda j: (bisect.bisect_right(bounds, attained[j.job_id]), j.submit, j.job_id),
        ):
            node = running.get(job.job_id)
            if node is None or free[node] < job.gpus:
                node = next((k for k in range(nodes) if free[k] >= job.gpus), None)
            if node is not None:
                free[node] -= job.gpus
                placed[job.job_id] = node
            if not any(free):
                break
        running = placed
    return jct_sum / max(1, n)


# (label, policy, spare order): the default first; sjf is told the runtime limits users give
# (duration-blind), "sjf oracle" the true durations (the reference for average JCT).
# "fs packed": fairshare with borrowed work kept apart from guaranteed work (pack_borrowed).
POLICIES = (
    ("fairshare", "fairshare", "share"),
    ("fs las", "fairshare", "las"),
    ("fs tiresias", "fairshare", "tiresias"),
    ("fs slowdown", "fairshare", "slowdown"),
    ("fs packed", "fairshare", "share"),
    ("fifo", "fifo", "share"),
    ("sjf", "sjf", "share"),
)
ORACLE = "sjf oracle"
WAIT_P99_TARGET = 45 * 60.0
JCT_TARGET = 1.5  # x the oracle SJF's average JCT
PREEMPTIONS_TARGET = 0.1  # per job
LOST_TARGET = 0.02  # of GPU-hours delivered
FLOOR_TARGET = 2.0  # wall time x the floor: the aim


def timed(fn, *args, **kwargs):
    """(result, wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def target_cells(result, metrics, oracle: float, wall: float, floor: float) -> list:
    """Each target of the guarantee issue as (text with its number, met)."""
    r, m = result, metrics
    return [
        (f"p99 {m.guarantee_wait_p99 / 60:6.1f} min", m.guarantee_wait_p99 <= WAIT_P99_TARGET),
        (f"worse off {len(m.worse_off_teams):2d}", not m.worse_off_teams),
        (f"JCT {r.avg_jct / oracle:5.2f}x", r.avg_jct <= JCT_TARGET * oracle),
        (f"preempt {r.preemptions / max(1, r.jobs):.4f}",
         r.preemptions <= PREEMPTIONS_TARGET * r.jobs),
        (f"lost {r.gpu_hours_lost / max(1e-9, r.gpu_hours_delivered):5.2%}",
         r.gpu_hours_lost <= LOST_TARGET * r.gpu_hours_delivered),
        (f"wall {wall / floor:5.2f}x", wall <= FLOOR_TARGET * floor),
    ]  # fmt: skip


def format_cells(cells: list) -> str:
    met = sum(ok for _, ok in cells)
    return (
        " | ".join(f"{text} {'met' if ok else 'MISSED'}" for text, ok in cells)
        + f" | {met}/{len(cells)} met"
    )


def replay_case(
    label: str,
    jobs,
    gpus,
    nodes: int,
    per_node: int,
    ideal: bool = False,
    policies: tuple[str, ...] | None = None,
) -> dict:
    """Every policy of ``POLICIES`` and the oracle SJF on one trace: wall and CPU time against
    the floor, the metrics table, what each team sees (guarantee wait, shared vs alone, rho)
    and, per policy, each target of the guarantee issue met or missed, with its number.
    ``policies``: the names of ``POLICIES`` to replay (default all); the oracle always runs."""
    from apps.jobs.scheduler import SchedulerConfig
    from apps.jobs.scheduler.replay import format_table, simulate
    from apps.jobs.scheduler.team_metrics import format_team_metrics, team_metrics
    from apps.jobs.scheduler.trace import default_quotas

    quotas = default_quotas(gpus, sorted({j.team for j in jobs}))
    print(f"(b) replay {label}: {len(jobs):,} jobs on {len(gpus)} GPUs")
    # The floor's fastest of three runs (wall and CPU each): the strictest floor.
    floors = [timed(fifo_floor, jobs, nodes, per_node) for _ in range(3)]
    floor, floor_cpu = min(f[1] for f in floors), min(f[2] for f in floors)
    print(
        f"  floor (minimal heap FIFO) wall {floor:7.2f} s  CPU {floor_cpu:7.2f} s  "
        f"avg JCT {floors[0][0][1] / 3600:.2f} h"
    )
    results, walls, cpus = {}, {}, {}
    chosen = [p for p in POLICIES if policies is None or p[0] in policies]
    runs = [(name, policy, order, "classes") for name, policy, order in chosen]
    runs.append((ORACLE, "sjf", "share", "exact"))
    for name, policy, order, limits in runs:
        config = SchedulerConfig(spare_order=order, pack_borrowed=name == "fs packed")
        results[name], walls[name], cpus[name] = timed(
            simulate, jobs, gpus, quotas, policy, config, runtime_limits=limits
        )
        print(
            f"  {name:11s} wall {walls[name]:7.2f} s  CPU {cpus[name]:7.2f} s  "
            f"{len(jobs) / walls[name]:9.0f} jobs/s  ratio to floor: wall "
            f"{walls[name] / floor:5.2f}x, CPU {cpus[name] / floor_cpu:5.2f}x",
            flush=True,
        )
    print(
        format_table({n: results[n] for n in ("fairshare", "fifo", "sjf", ORACLE) if n in results})
    )
    metrics = {name: team_metrics(result, quotas) for name, result in results.items()}
    if "fairshare" in metrics:
        print("  what teams see (guarantee wait, avg JCT shared vs alone, rho = shared / alone):")
        print(format_team_metrics({"fairshare": metrics["fairshare"]}))
    oracle = results[ORACLE].avg_jct
    print(
        f"  targets per policy (wait p99 <= {WAIT_P99_TARGET / 60:.0f} min | 0 teams worse off "
        f"| JCT <= {JCT_TARGET} x oracle SJF | preemptions <= {PREEMPTIONS_TARGET} / job | "
        f"lost <= {LOST_TARGET:.0%} | wall <= {FLOOR_TARGET:.0f} x floor, the aim):"
    )
    for name, *_ in chosen:
        cells = target_cells(results[name], metrics[name], oracle, walls[name], floor)
        print(f"    {name:11s} {format_cells(cells)}")
    if ideal and "fairshare" in results:
        best = ideal_las(jobs, nodes, per_node)
        print(
            f"  duration-blind ideal (preemptive Tiresias LAS, preemption free, no teams): avg "
            f"JCT {best / 3600:.2f} h = {best / oracle:.2f} x the oracle SJF; fairshare "
            f"{results['fairshare'].avg_jct / best:.2f} x this ideal"
        )
    return {
        "results": results,
        "walls": walls,
        "floor": floor,
        "metrics": metrics,
        "oracle": oracle,
        "policies": [name for name, *_ in chosen],
    }


def average_nodes(jobs, per_node: int = 8, load: float = 0.75) -> int:
    """Nodes the trace loads to about ``load`` on average: GPU-seconds asked / (submission
    span x GPUs per node x load)."""
    span = max(j.submit for j in jobs) - min(j.submit for j in jobs)
    asked = sum(j.gpus * j.duration for j in jobs)
    return max(1, round(asked / (span * per_node * load)))


BUSY_DAYS = 30


def busy_month_nodes(jobs, per_node: int = 8, load: float = 0.75, days: int = BUSY_DAYS) -> int:
    """Nodes the trace's last ``days`` days load to about ``load``: the GPU-seconds its jobs
    would run in that window if each started on arrival (jobs that arrived earlier and still
    run included) / (window x GPUs per node x load)."""
    end = max(j.submit for j in jobs)
    start = end - days * 86400.0
    busy = sum(
        j.gpus * max(0.0, min(j.submit + j.duration, end) - max(j.submit, start)) for j in jobs
    )
    return max(1, round(busy / (days * 86400.0 * per_node * load)))


ALIBABA_FLEETS = ("average", "busy-month", "both")


def seed_sweep(max_jobs: int, seeds: list[int]) -> None:
    """The default policy's targets on the synthetic trace drawn with each of ``seeds``: its
    GPU-hours lost come mostly from a few multi-node gangs stopped after hours, so one seed
    says little; the median and the worst say more."""
    from apps.jobs.scheduler import SchedulerConfig
    from apps.jobs.scheduler.replay import simulate
    from apps.jobs.scheduler.team_metrics import team_metrics
    from apps.jobs.scheduler.trace import default_quotas, parse_fleet
    from bench.tracegen import generate

    gpus = parse_fleet("64x8:GPU")
    print(f"(d) fairshare on the synthetic trace ({max_jobs:,} jobs, 64x8 GPUs), seed by seed:")
    lost_shares = []
    for seed in seeds:
        jobs, _ = generate(jobs=max_jobs, seed=seed)
        quotas = default_quotas(gpus, sorted({j.team for j in jobs}))
        result, wall, _ = timed(simulate, jobs, gpus, quotas, "fairshare", SchedulerConfig())
        oracle = simulate(jobs, gpus, quotas, "sjf", SchedulerConfig(), runtime_limits="exact")
        floor = min(timed(fifo_floor, jobs, 64, 8)[1] for _ in range(3))
        cells = target_cells(result, team_metrics(result, quotas), oracle.avg_jct, wall, floor)
        lost_shares.append(result.gpu_hours_lost / max(1e-9, result.gpu_hours_delivered))
        print(f"    seed {seed:5d} {format_cells(cells)}", flush=True)
    met = sum(share <= LOST_TARGET for share in lost_shares)
    print(
        f"  GPU-hours lost over {len(seeds)} seeds: median {statistics.median(lost_shares):.2%}, "
        f"worst {max(lost_shares):.2%}, <= {LOST_TARGET:.0%} on {met} of {len(seeds)}"
    )


def bench_replay(
    max_jobs: int,
    seed: int,
    policies: tuple[str, ...] | None = None,
    alibaba_fleet: str = "average",
) -> None:
    from apps.jobs.scheduler.trace import load_alibaba_pods, parse_fleet
    from bench.tracegen import generate

    jobs, summary = generate(jobs=max_jobs, seed=seed)
    print(f"synthetic trace (bench/tracegen.py, seed {seed}): {summary}")
    replay_case("synthetic trace", jobs, parse_fleet("64x8:GPU"), 64, 8, policies=policies)
    pods = TRACES / "alibaba_openb_pod_list_default.csv"
    if not pods.exists():
        print(f"(c) skipped: {pods} not found")
        return
    pod_jobs = load_alibaba_pods(pods).jobs
    span = max(j.submit for j in pod_jobs) - min(j.submit for j in pod_jobs)
    asked = sum(j.gpus * j.duration for j in pod_jobs)
    print(f"Alibaba pod list: offered {asked / 3600:,.0f} GPU-h over {span / 86400:.0f} days")
    # On its own 1,500-node list it never queues: a fleet it loads to about 75 %, on average
    # over the whole list or over its last month, when 90 % of its pods arrive.
    sizings = []
    if alibaba_fleet in ("average", "both"):
        sizings.append(("149-day average", average_nodes(pod_jobs)))
    if alibaba_fleet in ("busy-month", "both"):
        sizings.append((f"last {BUSY_DAYS} days", busy_month_nodes(pod_jobs)))
    cases = []
    for sizing, nodes in sizings:
        # The ideal costs seconds here; on the synthetic trace (64 nodes, 84,000 jobs) minutes.
        label = f"Alibaba openb pod list, fleet sized on its {sizing} ({nodes}x8)"
        fleet = parse_fleet(f"{nodes}x8:GPU")
        case = replay_case(label, pod_jobs, fleet, nodes, 8, ideal=True, policies=policies)
        cases.append((sizing, nodes, case))
    if len(cases) > 1:
        print("  Alibaba pod list by fleet sizing, targets per policy:")
        for name in cases[0][2]["policies"]:
            for sizing, nodes, case in cases:
                cells = target_cells(
                    case["results"][name], case["metrics"][name], case["oracle"],
                    case["walls"][name], case["floor"],
                )  # fmt: skip
                print(f"    {name:11s} {nodes:2d}x8 ({sizing:15s}) {format_cells(cells)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-replay", action="store_true")
    parser.add_argument("--cycle-gpus", type=int, default=2_000, help="(a) GPUs, 8 per node")
    parser.add_argument("--cycle-jobs", type=int, default=10_000, help="(a) queued jobs")
    parser.add_argument("--replay-jobs", type=int, default=84_000)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--skip-cycle", action="store_true", help="skip (a)")
    parser.add_argument(
        "--seeds",
        help="(d) comma-separated seeds: the default policy's targets on the synthetic trace "
        "drawn with each, and the median GPU-hours lost (skips (b) and (c))",
    )
    parser.add_argument(
        "--policies",
        help="comma-separated names of POLICIES to replay (default all; the oracle SJF always)",
    )
    parser.add_argument(
        "--alibaba-fleet",
        choices=ALIBABA_FLEETS,
        default="average",
        help="(c) size the fleet on the pod list's whole span, on its busy last month, or both",
    )
    args = parser.parse_args()
    policies = None
    if args.policies:
        policies = tuple(p.strip() for p in args.policies.split(","))
        unknown = set(policies) - {name for name, *_ in POLICIES}
        if unknown:
            parser.error(f"unknown policies: {', '.join(sorted(unknown))}")
    if not args.skip_cycle:
        bench_cycle(args.cycle_gpus, args.cycle_jobs)
    if args.seeds:
        seed_sweep(args.replay_jobs, [int(s) for s in args.seeds.split(",")])
    elif not args.skip_replay:
        bench_replay(args.replay_jobs, args.seed, policies, args.alibaba_fleet)


if __name__ == "__main__":
    main()
