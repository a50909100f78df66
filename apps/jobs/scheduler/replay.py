"""Replay a job trace in simulated time with the live scheduler. Pure Python, no Django.

``simulate(jobs, gpus, quotas, policy)`` is event-driven: at every instant where a job arrives
or ends it runs one ``schedule()`` cycle on the simulated cluster, starts what it places, stops
what it preempts (the job goes back to the queue and later restarts from the beginning), and
moves on to the next event. A job runs for its trace ``duration``; its ``max_runtime`` is the
duration unless the trace gives one. Jobs that could never fit (more GPUs than any node /
model / quota limit allows) are left out and counted.

Metrics (``ReplayResult``): utilization (GPU-seconds run / GPUs x makespan), average / p50 /
p95 job completion time and wait (time from submit to the final start), average wait per team,
GPU-hours per team, Jain's fairness index of (team's share of GPU-time / team's share of the
guarantee) over teams with a guarantee, preemption count and jobs that never fit.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from apps.jobs.scheduler.core import SchedulerConfig, decay_usage, schedule
from apps.jobs.scheduler.state import (
    ClusterState,
    GpuInfo,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
)


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: int
    submit: float  # seconds
    duration: float  # seconds of work
    gpus: int
    team: str
    model: str | None = None  # None: any model
    max_runtime: float | None = None  # defaults to duration
    same_node: bool = True


@dataclass
class ReplayResult:
    policy: str
    jobs: int
    finished: int
    never_fit: int
    preemptions: int
    utilization: float
    avg_jct: float
    p50_jct: float
    p95_jct: float
    avg_wait: float
    p50_wait: float
    p95_wait: float
    jain_fairness: float
    makespan: float
    team_avg_wait: dict[str, float] = field(default_factory=dict)
    team_gpu_hours: dict[str, float] = field(default_factory=dict)
    team_jobs: dict[str, int] = field(default_factory=dict)
    # team -> model -> [GPU-hours, of which over quota], for pricing a replay
    team_model_gpu_hours: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


def jain_index(values: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    if not values:
        return 1.0
    total = sum(values)
    squares = sum(v * v for v in values)
    return (total * total) / (len(values) * squares) if squares else 1.0


def _fits_ever(job: TraceJob, gpus: list[GpuInfo], quotas: list[TeamQuota]) -> bool:
    node_sizes: dict[tuple[str, str], int] = Counter((g.model, g.node) for g in gpus)
    per_model: dict[str, int] = Counter(g.model for g in gpus)
    largest: dict[str, int] = defaultdict(int)
    for (model, _), n in node_sizes.items():
        largest[model] = max(largest[model], n)
    limits = {(q.team, q.model): q.limit for q in quotas}
    for model in per_model:
        if job.model is not None and job.model != model:
            continue
        room = largest[model] if job.same_node else per_model[model]
        limit = limits.get((job.team, model), limits.get((job.team, None)))
        if job.gpus <= room and (limit is None or job.gpus <= limit):
            return True
    return False


def _worth_a_cycle(
    policy: str,
    config: SchedulerConfig,
    capacity: int,
    running: dict[int, RunningJob],
    queue: dict[int, QueuedJob],
    quotas: list[TeamQuota],
) -> bool:
    """False when a cycle cannot change anything: no GPU is free and nothing can be preempted
    (saves O(queue) work per event when the cluster is full)."""
    busy = sum(len(r.gpu_ids) for r in running.values())
    if busy < capacity:
        return True
    if policy != "fairshare" or not config.preemption_enabled:
        return False
    if not any(r.over_quota for r in running.values()):
        return False
    guaranteed: dict[str, int] = defaultdict(int)
    for q in quotas:
        guaranteed[q.team] += q.guaranteed
    held: dict[str, int] = defaultdict(int)
    for r in running.values():
        if not r.over_quota:
            held[r.team] += len(r.gpu_ids)
    return any(held[j.team] + j.gpu_count <= guaranteed[j.team] for j in queue.values())


def simulate(
    jobs: list[TraceJob],
    gpus: list[GpuInfo],
    quotas: list[TeamQuota],
    policy: str,
    config: SchedulerConfig | None = None,
) -> ReplayResult:
    """Replay ``jobs`` on ``gpus`` under ``policy``; see the module docstring."""
    config = replace(config or SchedulerConfig(), explain=False)
    fit_cache: dict[tuple, bool] = {}
    arrivals: list[TraceJob] = []
    never_fit = 0
    for j in jobs:
        key = (j.gpus, j.team, j.model, j.same_node)
        if key not in fit_cache:
            fit_cache[key] = _fits_ever(j, gpus, quotas)
        if fit_cache[key]:
            arrivals.append(j)
        else:
            never_fit += 1
    arrivals.sort(key=lambda j: (j.submit, j.job_id))
    by_id = {j.job_id: j for j in arrivals}
    model_of = {g.gpu_id: g.model for g in gpus}

    queue: dict[int, QueuedJob] = {}
    running: dict[int, RunningJob] = {}
    ends: list[tuple[float, int, int]] = []  # (end time, job id, attempt)
    attempt: dict[int, int] = defaultdict(int)
    final_start: dict[int, float] = {}
    finish: dict[int, float] = {}
    gpu_seconds: dict[str, float] = defaultdict(float)
    model_seconds: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    preemptions = 0
    usage: dict[str, float] = {}
    next_arrival = 0
    now = arrivals[0].submit if arrivals else 0.0
    first = now
    last_usage_at = now

    def queued_of(j: TraceJob) -> QueuedJob:
        return QueuedJob(
            j.job_id,
            j.team,
            j.model,
            j.gpus,
            j.max_runtime or j.duration,
            j.submit,
            PriorityClass.OVER_QUOTA,
            j.same_node,
        )

    def _start(placements, at: float) -> None:
        for placement in placements:
            j = by_id[placement.job_id]
            del queue[j.job_id]
            attempt[j.job_id] += 1
            final_start[j.job_id] = at
            running[j.job_id] = RunningJob(
                j.job_id,
                j.team,
                model_of[placement.gpu_ids[0]],
                placement.gpu_ids,
                at,
                j.max_runtime or j.duration,
                PriorityClass.OVER_QUOTA,
                placement.over_quota,
            )
            heapq.heappush(ends, (at + j.duration, j.job_id, attempt[j.job_id]))

    def stop(job_id: int, at: float) -> None:
        r = running.pop(job_id)
        used = len(r.gpu_ids) * (at - r.started_at)
        gpu_seconds[r.team] += used
        model_seconds[r.team, r.model][0] += used
        if r.over_quota:
            model_seconds[r.team, r.model][1] += used

    while next_arrival < len(arrivals) or ends or queue:
        candidates = []
        if next_arrival < len(arrivals):
            candidates.append(arrivals[next_arrival].submit)
        if ends:
            candidates.append(ends[0][0])
        if not candidates:
            break  # queued jobs that no event can ever start
        now = max(now, min(candidates))
        usage = decay_usage(
            usage,
            list(running.values()),
            elapsed=now - last_usage_at,
            half_life=config.usage_half_life_seconds,
        )
        last_usage_at = now
        while ends and ends[0][0] <= now:
            _, job_id, att = heapq.heappop(ends)
            if job_id in running and attempt[job_id] == att:
                stop(job_id, now)
                finish[job_id] = now
        while next_arrival < len(arrivals) and arrivals[next_arrival].submit <= now:
            j = arrivals[next_arrival]
            queue[j.job_id] = queued_of(j)
            next_arrival += 1
        # A cycle right after a preemption starts the job that waited for it, at once.
        for _ in range(2):
            if not queue or not _worth_a_cycle(policy, config, len(gpus), running, queue, quotas):
                break
            state = ClusterState(
                now,
                gpus,
                list(queue.values()),
                list(running.values()),
                [],
                quotas,
                usage,
            )
            decision = schedule(state, policy, config)
            for pre in decision.preemptions:
                if pre.job_id in running:
                    stop(pre.job_id, now)
                    attempt[pre.job_id] += 1
                    queue[pre.job_id] = queued_of(by_id[pre.job_id])
                    preemptions += 1
            _start(decision.placements, now)
            if not decision.preemptions:
                break

    makespan = max(finish.values(), default=first) - first
    capacity = len(gpus)
    done = [by_id[i] for i in finish]
    jct = [finish[j.job_id] - j.submit for j in done]
    wait = [final_start[j.job_id] - j.submit for j in done]
    team_wait: dict[str, list[float]] = defaultdict(list)
    for j in done:
        team_wait[j.team].append(final_start[j.job_id] - j.submit)
    guaranteed: dict[str, float] = defaultdict(float)
    for q in quotas:
        guaranteed[q.team] += q.guaranteed
    total_g = sum(guaranteed.values())
    total_used = sum(gpu_seconds.values())
    ratios = [
        (gpu_seconds.get(team, 0.0) / total_used) / (g / total_g)
        for team, g in guaranteed.items()
        if g > 0 and total_used > 0
    ]
    return ReplayResult(
        policy=policy,
        jobs=len(jobs),
        finished=len(done),
        never_fit=never_fit,
        preemptions=preemptions,
        utilization=total_used / (capacity * makespan) if capacity and makespan else 0.0,
        avg_jct=sum(jct) / len(jct) if jct else 0.0,
        p50_jct=_percentile(jct, 0.5),
        p95_jct=_percentile(jct, 0.95),
        avg_wait=sum(wait) / len(wait) if wait else 0.0,
        p50_wait=_percentile(wait, 0.5),
        p95_wait=_percentile(wait, 0.95),
        jain_fairness=jain_index(ratios),
        makespan=makespan,
        team_avg_wait={t: sum(v) / len(v) for t, v in sorted(team_wait.items())},
        team_gpu_hours={t: s / 3600.0 for t, s in sorted(gpu_seconds.items())},
        team_jobs=dict(sorted(Counter(j.team for j in done).items())),
        team_model_gpu_hours=_hours_by_team_and_model(model_seconds),
    )


def _hours_by_team_and_model(seconds: dict[tuple[str, str], list[float]]) -> dict:
    result: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for (team, model), (used, over) in sorted(seconds.items()):
        result[team][model] = [used / 3600.0, over / 3600.0]
    return dict(result)


ROWS = [
    ("jobs finished", "finished", "{:,}"),
    ("never fit", "never_fit", "{:,}"),
    ("preemptions", "preemptions", "{:,}"),
    ("utilization", "utilization", "{:.1%}"),
    ("avg JCT (h)", "avg_jct", "h"),
    ("p50 JCT (h)", "p50_jct", "h"),
    ("p95 JCT (h)", "p95_jct", "h"),
    ("avg wait (h)", "avg_wait", "h"),
    ("p50 wait (h)", "p50_wait", "h"),
    ("p95 wait (h)", "p95_wait", "h"),
    ("Jain fairness", "jain_fairness", "{:.3f}"),
]


def format_table(results: dict[str, ReplayResult]) -> str:
    """The metrics of several policies side by side, as fixed-width text."""
    names = list(results)
    lines = ["  " + f"{'metric':16s}" + "".join(f"{n:>14s}" for n in names)]
    for label, attr, fmt in ROWS:
        cells = []
        for n in names:
            value = getattr(results[n], attr)
            cells.append(f"{value / 3600:.2f}" if fmt == "h" else fmt.format(value))
        lines.append("  " + f"{label:16s}" + "".join(f"{c:>14s}" for c in cells))
    teams = sorted({t for r in results.values() for t in r.team_avg_wait})
    for team in teams:
        cells = [f"{results[n].team_avg_wait.get(team, 0.0) / 3600:.2f}" for n in names]
        lines.append("  " + f"wait {team[:11]:11s}" + "".join(f"{c:>14s}" for c in cells))
    return "\n".join(lines)
