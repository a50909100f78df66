"""What a replay measured (``ReplayResult``), computed from its job records, and how it is
printed (``format_table``) and written (``write_job_rows``, one row per job in ``JOB_COLUMNS``).
Pure Python, no Django."""

from __future__ import annotations

import csv
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

SLOWDOWN_FLOOR_SECONDS = 10.0


JOB_COLUMNS = (
    "job_id",
    "team",
    "gpus",
    "submit",
    "duration",
    "first_start",
    "final_start",
    "end",
    "attempts",
    "preemptions",
    "gpu_seconds_lost",
    "model",  # the model it asked for; empty: any model
    "within_guarantee",  # at submit, the team's GPUs of its model + the job's <= guarantee
    # seconds from submit to first start during which the team's unused guarantee of its model
    # had room for it after the team's waiting jobs ahead of it in its order (``room_clock``)
    "guarantee_room_wait",
)


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
    jain_fairness: float  # over per-team average slowdown
    makespan: float
    avg_slowdown: float = 0.0
    gpu_hours_delivered: float = 0.0
    gpu_hours_lost: float = 0.0
    team_avg_wait: dict[str, float] = field(default_factory=dict)
    team_p95_wait: dict[str, float] = field(default_factory=dict)
    team_avg_slowdown: dict[str, float] = field(default_factory=dict)
    team_gpu_hours: dict[str, float] = field(default_factory=dict)
    team_jobs: dict[str, int] = field(default_factory=dict)
    team_below_guarantee_hours: dict[str, float] = field(default_factory=dict)
    # team -> model -> [GPU-hours, of which over quota], for pricing a replay
    team_model_gpu_hours: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # (seconds since the first submit, jobs queued), sampled
    queue_length: list[tuple[float, int]] = field(default_factory=list)
    models: list[str] = field(default_factory=list)  # the fleet's GPU models
    # Nodes (``replay_power``): node-hours with no job on the node (powered on or off), and with
    # power saving the node-hours off, the energy that saved, power-downs, the most of them one
    # node had in one day of the replay, and bookings started late (0: the replay has none)
    idle_node_hours: float = 0.0
    node_hours_off: float = 0.0
    energy_saved_kwh: float = 0.0
    energy_saved_kwh_by_model: dict[str, float] = field(default_factory=dict)
    power_cycles: int = 0
    max_cycles_per_node_day: int = 0
    bookings_late: int = 0
    bookings_late_reason: str = ""
    power_saving: dict | None = None  # its settings; None: always on
    # one tuple per finished job, in JOB_COLUMNS order (not part of as_dict)
    job_rows: list[tuple] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "job_rows"}


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


def replay_result(
    policy, jobs, never_fit, preemptions, records, gpus, gpu_seconds, model_seconds,
    below_seconds, queue_length, first, nodes=None,
) -> ReplayResult:  # fmt: skip
    done = [rec for rec in records.values() if rec.end is not None]
    makespan = max((rec.end for rec in done), default=first) - first
    jct = [rec.end - rec.job.submit for rec in done]
    wait = [rec.final_start - rec.job.submit for rec in done]
    slowdown = [
        (rec.end - rec.job.submit) / max(rec.job.duration, SLOWDOWN_FLOOR_SECONDS) for rec in done
    ]
    team_wait: dict[str, list[float]] = defaultdict(list)
    team_slow: dict[str, list[float]] = defaultdict(list)
    for rec, w, s in zip(done, wait, slowdown, strict=True):
        team_wait[rec.job.team].append(w)
        team_slow[rec.job.team].append(s)
    team_avg_slowdown = {t: sum(v) / len(v) for t, v in sorted(team_slow.items())}
    total_used = sum(gpu_seconds.values())
    lost = sum(rec.lost for rec in records.values())
    capacity = len(gpus)
    rows = [
        (
            rec.job.job_id,
            rec.job.team,
            rec.job.gpus,
            rec.job.submit,
            rec.job.duration,
            rec.first_start,
            rec.final_start,
            rec.end,
            rec.attempts,
            rec.preemptions,
            rec.lost,
            rec.job.model,
            rec.within_guarantee,
            rec.room_wait,
        )
        for rec in sorted(records.values(), key=lambda r: r.job.job_id)
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
        jain_fairness=jain_index(list(team_avg_slowdown.values())),
        makespan=makespan,
        avg_slowdown=sum(slowdown) / len(slowdown) if slowdown else 0.0,
        gpu_hours_delivered=total_used / 3600.0,
        gpu_hours_lost=lost / 3600.0,
        team_avg_wait={t: sum(v) / len(v) for t, v in sorted(team_wait.items())},
        team_p95_wait={t: _percentile(v, 0.95) for t, v in sorted(team_wait.items())},
        team_avg_slowdown=team_avg_slowdown,
        team_gpu_hours={t: s / 3600.0 for t, s in sorted(gpu_seconds.items())},
        team_jobs=dict(sorted(Counter(rec.job.team for rec in done).items())),
        team_below_guarantee_hours={t: s / 3600.0 for t, s in sorted(below_seconds.items())},
        team_model_gpu_hours=_hours_by_team_and_model(model_seconds),
        queue_length=queue_length,
        models=sorted({g.model for g in gpus}),
        job_rows=rows,
        **(nodes or {}),
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
    ("GPU-h lost", "gpu_hours_lost", "{:,.1f}"),
    ("GPU-h delivered", "gpu_hours_delivered", "{:,.0f}"),
    ("utilization", "utilization", "{:.1%}"),
    ("makespan (h)", "makespan", "h"),
    ("avg JCT (h)", "avg_jct", "h"),
    ("p50 JCT (h)", "p50_jct", "h"),
    ("p95 JCT (h)", "p95_jct", "h"),
    ("avg wait (h)", "avg_wait", "h"),
    ("p50 wait (h)", "p50_wait", "h"),
    ("p95 wait (h)", "p95_wait", "h"),
    ("avg slowdown", "avg_slowdown", "{:.2f}"),
    ("Jain slowdown", "jain_fairness", "{:.3f}"),
]


def format_table(results: dict[str, ReplayResult]) -> str:
    """The metrics of several policies side by side, as fixed-width text, then per team:
    average / p95 wait (h), average slowdown and hours below guarantee with work queued."""
    names = list(results)
    lines = ["  " + f"{'metric':16s}" + "".join(f"{n:>14s}" for n in names)]
    for label, attr, fmt in ROWS:
        cells = []
        for n in names:
            value = getattr(results[n], attr)
            cells.append(f"{value / 3600:.2f}" if fmt == "h" else fmt.format(value))
        lines.append("  " + f"{label:16s}" + "".join(f"{c:>14s}" for c in cells))
    teams = sorted({t for r in results.values() for t in r.team_avg_wait})
    if teams:
        lines.append(
            "  per team: jobs | avg wait h | p95 wait h | avg slowdown | h below guarantee"
        )
    for team in teams:
        cells = []
        for n in names:
            r = results[n]
            cells.append(
                f"{r.team_jobs.get(team, 0):>6,} {r.team_avg_wait.get(team, 0.0) / 3600:6.2f} "
                f"{r.team_p95_wait.get(team, 0.0) / 3600:6.2f} "
                f"{r.team_avg_slowdown.get(team, 0.0):7.2f} "
                f"{r.team_below_guarantee_hours.get(team, 0.0):7.1f}"
            )
        lines.append("  " + f"{team[:14]:14s}" + "  ".join(f"{c:>36s}" for c in cells))
    return "\n".join(lines)


def write_job_rows(result: ReplayResult, handle) -> int:
    """One CSV row per job (``JOB_COLUMNS``); times in seconds as in the trace."""

    writer = csv.writer(handle)
    writer.writerow(JOB_COLUMNS)
    for row in result.job_rows:
        writer.writerow(["" if v is None else (round(v, 3) if isinstance(v, float) else v)
                         for v in row])  # fmt: skip
    return len(result.job_rows)
