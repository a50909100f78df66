"""A loaded synthetic multi-team GPU trace for scheduler benchmarks.

    .venv/bin/python bench/tracegen.py --out var/synthetic_trace.csv   # writes the CSV
    from bench.tracegen import generate                                # or in-process

The shape follows what published studies of shared GPU clusters report (Philly, Helios,
Alibaba PAI): most jobs use one GPU, a small tail uses many nodes, durations are heavy-tailed
(minutes to days), teams differ a lot in how much and what they submit, and submissions follow
the working day with deadline bursts. Everything is drawn from ``random.Random(seed)``, so a
seed gives the same trace on every machine.

* ``days`` days (default 60) of submissions, ``jobs`` jobs (default 84,000).
* ``teams`` teams (default 15) of four kinds, each with its own job count weight, size mix and
  duration scale: ``dev`` (many short 1-GPU jobs: notebooks, debugging), ``exp`` (experiment
  sweeps, 1-4 GPUs), ``train`` (longer 1-8 GPU training) and ``llm`` (the 16-128 GPU
  multi-node tail plus some 8-GPU jobs).
* The last ``small_teams`` of them (default 3) are small: 3 to 30 jobs each of 1 to 8 GPUs,
  training-length, submitted in one burst of up to 2 hours on a random working day, mostly
  while the big teams keep the fleet busy. Their guarantee must come back when they need it.
* Sizes overall: about 93 % 1-GPU, 6 % 2-8 GPUs, 0.4 % 16-128 GPUs.
* Durations: log-normal (sigma 1.8) times the team's scale, at least 30 s, at most 7 days.
* Load: each day gets a weight, about 1 on ordinary days, 0.45 on weekends and 2.2-2.6 on
  a few burst days (paper deadlines); within a day submissions peak in working hours. Durations
  are scaled so the average offered load (GPU-seconds submitted per day / fleet GPU-seconds per
  day) is ``load`` (default 0.75) on ``fleet_gpus`` GPUs (default 512 = 64 nodes x 8); burst
  days then offer well over 150 %.
* About 60 % of jobs of 8 GPUs or more, and 15 % of the others, are ``checkpointable``.
* Each big team has 3 to 12 users, a small team 1 to 3; a team's jobs go to its users with
  Zipf weights (1, 1/2, 1/3, ...: one heavy user, a few light ones). Users are drawn from
  their own ``random.Random(seed + 1)``, so a seed gives the same jobs with or without them.

Columns: ``job_id, submit, duration, gpus, team, checkpointable, user`` (seconds).
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sys
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.jobs.scheduler.replay import TraceJob  # noqa: E402

DAY = 86400.0
# kind: (weight of job count, size mix [(gpus, p)], duration scale)
KINDS = {
    "dev": (3.0, [(1, 0.99), (2, 0.01)], 0.25),
    "exp": (2.0, [(1, 0.93), (2, 0.04), (4, 0.03)], 0.7),
    "train": (1.0, [(1, 0.80), (2, 0.06), (4, 0.07), (8, 0.07)], 2.0),
    "llm": (0.5, [(1, 0.70), (8, 0.16), (16, 0.06), (32, 0.04), (64, 0.025), (128, 0.015)], 3.0),
}
TEAM_KINDS = ["dev", "exp", "train", "llm", "exp", "dev", "train", "exp", "llm", "dev"]


def _hour_weights() -> list[float]:
    # quiet nights, a morning ramp, a working-day plateau, an evening tail
    return [0.3, 0.25, 0.2, 0.2, 0.2, 0.3, 0.5, 0.8, 1.3, 1.7, 1.9, 1.9,
            1.6, 1.8, 1.9, 1.9, 1.7, 1.4, 1.1, 0.9, 0.8, 0.6, 0.5, 0.4]  # fmt: skip


def generate(
    *,
    jobs: int = 84_000,
    teams: int = 15,
    days: int = 60,
    load: float = 0.75,
    fleet_gpus: int = 512,
    seed: int = 2024,
    small_teams: int = 3,
) -> tuple[list[TraceJob], dict]:
    """The trace and a summary (offered load per day, size mix) to print beside it."""
    if not 0 <= small_teams < teams:
        raise ValueError("small_teams must be at least 0 and fewer than teams.")
    rng = random.Random(seed)
    big = teams - small_teams
    names = [f"team-{k + 1:02d}" for k in range(big)]
    kinds = {name: TEAM_KINDS[k % len(TEAM_KINDS)] for k, name in enumerate(names)}
    # teams of one kind still differ: a random activity factor
    weights = [KINDS[kinds[n]][0] * rng.uniform(0.5, 1.5) for n in names]

    day_weight = []
    burst_days = set(rng.sample(range(days), max(1, days // 12)))
    for d in range(days):
        if d in burst_days:
            day_weight.append(rng.uniform(2.2, 2.6))
        elif d % 7 in (5, 6):
            day_weight.append(rng.uniform(0.35, 0.55))
        else:
            day_weight.append(rng.uniform(0.8, 1.2))
    hours = _hour_weights()

    out = _small_teams(rng, small_teams, big, days)
    for k in range(len(out), jobs):
        day = rng.choices(range(days), weights=day_weight)[0]
        hour = rng.choices(range(24), weights=hours)[0]
        submit = day * DAY + hour * 3600.0 + rng.uniform(0, 3600.0)
        team = rng.choices(names, weights=weights)[0]
        _, sizes, scale = KINDS[kinds[team]]
        gpus = rng.choices([s for s, _ in sizes], weights=[p for _, p in sizes])[0]
        duration = scale * rng.lognormvariate(math.log(900.0), 1.8)
        checkpointable = rng.random() < (0.6 if gpus >= 8 else 0.15)
        out.append(TraceJob(k + 1, submit, duration, gpus, team, checkpointable=checkpointable))

    # Scale durations so the average offered load is `load` with the tail clamped to
    # [30 s, 7 days] (a few rounds: clamping moves the load a little each time).
    raw = out
    factor = 1.0
    for _ in range(4):
        out = [
            TraceJob(j.job_id, j.submit, min(7 * DAY, max(30.0, j.duration * factor)), j.gpus,
                     j.team, checkpointable=j.checkpointable)
            for j in raw
        ]  # fmt: skip
        offered = sum(j.gpus * j.duration for j in out) / (fleet_gpus * DAY * days)
        factor *= load / offered
    out = _with_users(out, random.Random(seed + 1), small=set(_small_names(big, small_teams)))
    out.sort(key=lambda j: (j.submit, j.job_id))
    per_day: dict[int, float] = defaultdict(float)
    for j in out:
        per_day[int(j.submit // DAY)] += j.gpus * j.duration / (fleet_gpus * DAY)
    daily = [per_day.get(d, 0.0) for d in range(days)]
    sizes_count: dict[int, int] = defaultdict(int)
    for j in out:
        sizes_count[j.gpus] += 1
    summary = {
        "jobs": len(out),
        "teams": teams,
        "days": days,
        "avg_offered_load": sum(daily) / days,
        "max_daily_load": max(daily),
        "days_over_150pct": sum(1 for v in daily if v > 1.5),
        "sizes": dict(sorted(sizes_count.items())),
        "small_teams": {
            t: n for t, n in sorted(Counter(j.team for j in out).items()) if t not in kinds
        },
        "users": len({(j.team, j.user) for j in out}),
        "one_gpu_share": sizes_count[1] / len(out),
        "checkpointable_share": sum(j.checkpointable for j in out) / len(out),
    }
    return out, summary


def _small_names(first: int, count: int) -> list[str]:
    return [f"team-{first + k + 1:02d}" for k in range(count)]


def _with_users(jobs: list[TraceJob], rng: random.Random, small: set[str]) -> list[TraceJob]:
    """The jobs, each given a user of its team (see the module docstring)."""
    users: dict[str, tuple[list[str], list[float]]] = {}
    for team in sorted({j.team for j in jobs}):
        n = rng.randint(1, 3) if team in small else rng.randint(3, 12)
        users[team] = ([f"{team}-user{k + 1}" for k in range(n)], [1 / (k + 1) for k in range(n)])
    return [
        replace(j, user=rng.choices(*users[j.team])[0])
        for j in sorted(jobs, key=lambda j: j.job_id)
    ]


def _small_teams(rng: random.Random, count: int, first: int, days: int) -> list[TraceJob]:
    """Jobs of ``count`` small teams (named after the big ones): each 3-30 jobs of 1-8 GPUs
    in one burst of up to 2 hours on a working day."""
    out: list[TraceJob] = []
    _, _, scale = KINDS["train"]
    working = [d for d in range(days) if d % 7 not in (5, 6)] or list(range(days))
    for k in range(count):
        team = _small_names(first, count)[k]
        start = rng.choice(working) * DAY + rng.uniform(8, 16) * 3600.0
        for _ in range(rng.randint(3, 30)):
            gpus = rng.choice([1, 2, 4, 8])
            duration = scale * rng.lognormvariate(math.log(900.0), 1.8)
            submit = start + rng.uniform(0, 2 * 3600.0)
            out.append(TraceJob(len(out) + 1, submit, duration, gpus, team))
    return out


def write_csv(jobs: list[TraceJob], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["job_id", "submit", "duration", "gpus", "team", "checkpointable", "user"])
        for j in jobs:
            writer.writerow([j.job_id, f"{j.submit:.0f}", f"{j.duration:.0f}", j.gpus, j.team,
                             int(j.checkpointable), j.user or ""])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="var/synthetic_trace.csv")
    parser.add_argument("--jobs", type=int, default=84_000)
    parser.add_argument("--teams", type=int, default=15)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--load", type=float, default=0.75)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--small-teams", type=int, default=3)
    args = parser.parse_args()
    jobs, summary = generate(
        jobs=args.jobs, teams=args.teams, days=args.days, load=args.load, seed=args.seed,
        small_teams=args.small_teams,
    )  # fmt: skip
    write_csv(jobs, Path(args.out))
    print(summary)


if __name__ == "__main__":
    main()
