"""What teams care about in a replay: does the guarantee come back, and is each team at least
as well off sharing as it would be alone? Pure Python, no Django.

``team_metrics(result, quotas)`` reads a replay's per-job rows (``ReplayResult.job_rows``) and
returns a ``TeamMetrics``: per team and overall,

* *guarantee wait*: over the team's within-guarantee jobs (at submit, the team's running GPUs
  of the job's model plus the job's GPUs fit its guarantee), first start - submit: p50, p99,
  worst and the share of jobs that waited more than 30 minutes;
* *time in the unused guarantee*: over the team's jobs that had it while waiting, the seconds
  from submit to first start during which the team's unused guarantee of the job's model had
  room for it after the team's waiting jobs ahead of it in the team's order took theirs
  (``room_clock``; not decided once at submit; of a backlog of same-size jobs, only those the
  room covers together with the jobs ahead): p99, worst and the share above 30 minutes. A
  reclaim owes a start within its delay to exactly this time;
* *sharing incentive*: over the team's jobs no larger than its guarantee, the average JCT in the
  replay against the same jobs replayed alone on the team's guaranteed GPUs (``alone_jct``:
  greedy FIFO); a team is *worse off* when shared > alone + 0.5 h;
* *finish-time fairness* per job (Themis): rho = JCT shared / JCT alone over the same jobs; the
  worst rho and the share of jobs with rho > 1.05.

With organisation units (``units``), the same figures per unit over every team below it
(``UnitOutcome``): the guarantee wait over all their within-guarantee jobs, and the sharing
incentive as the average JCT of all their compared jobs shared against each team's jobs alone
on its own guaranteed GPUs.

Jain's index over per-team slowdown stays in ``ReplayResult`` as context only.
``format_team_metrics`` prints one table per policy for ``replay_trace`` and the bench; the
what-if page compares two ``TeamMetrics`` (current and proposed quotas) team by team.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from apps.jobs.scheduler.quotas import QuotaBook
from apps.jobs.scheduler.state import TeamQuota

WAIT_LIMIT_SECONDS = 30 * 60.0  # a guarantee wait longer than this counts as late
WORSE_OFF_MARGIN_SECONDS = 0.5 * 3600.0  # shared JCT above alone + this: worse off
RHO_TOLERANCE = 1.05  # rho above this: the job finished later than it would have alone


@dataclass(frozen=True, slots=True)
class TeamOutcome:
    """One team's figures; times in seconds. ``jct_alone`` is None for a team with no
    guarantee (it has nothing of its own to run alone on)."""

    team: str
    jobs: int
    jct: float  # average JCT of all the team's finished jobs
    guaranteed: int  # GPUs guaranteed over the fleet's models
    within_guarantee_jobs: int
    guarantee_wait_p50: float
    guarantee_wait_p99: float
    guarantee_wait_max: float
    guarantee_wait_late_share: float  # share of within-guarantee jobs waiting > 30 min
    compared_jobs: int  # jobs no larger than the guarantee, finished in the replay
    jct_shared: float  # average over the compared jobs
    jct_alone: float | None
    worse_off: bool
    worst_rho: float | None
    rho_late_share: float  # share of compared jobs with rho > 1.05
    # Over the team's jobs that waited with its unused guarantee fitting them for some time
    # (``room_clock``): how long they had it, whatever they were counted at submission.
    room_wait_jobs: int = 0
    room_wait_p99: float = 0.0
    room_wait_max: float = 0.0
    room_wait_late_share: float = 0.0  # share of them with more than 30 min of it

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class UnitOutcome:
    """One unit's figures over every team below it; times in seconds."""

    unit: str
    teams: tuple[str, ...]
    jobs: int
    within_guarantee_jobs: int
    guarantee_wait_p50: float
    guarantee_wait_p99: float
    guarantee_wait_late_share: float
    compared_jobs: int
    jct_shared: float
    jct_alone: float | None
    worse_off: bool  # shared > alone + 0.5 h over all its compared jobs
    worse_off_teams: tuple[str, ...]

    def as_dict(self) -> dict:
        out = asdict(self)
        out["teams"] = list(self.teams)
        out["worse_off_teams"] = list(self.worse_off_teams)
        return out


@dataclass(frozen=True, slots=True)
class TeamMetrics:
    """Per team (``teams``) and over all jobs: the guarantee wait of every within-guarantee
    job, teams worse off than alone, rho over every compared job."""

    teams: dict[str, TeamOutcome] = field(default_factory=dict)
    within_guarantee_jobs: int = 0
    guarantee_wait_p50: float = 0.0
    guarantee_wait_p99: float = 0.0
    guarantee_wait_max: float = 0.0
    guarantee_wait_late_share: float = 0.0
    worse_off_teams: tuple[str, ...] = ()
    worst_rho: float | None = None
    rho_late_share: float = 0.0
    units: dict[str, UnitOutcome] = field(default_factory=dict)  # empty without units
    room_wait_jobs: int = 0  # as in ``TeamOutcome``, over all teams
    room_wait_p99: float = 0.0
    room_wait_max: float = 0.0
    room_wait_late_share: float = 0.0

    def as_dict(self) -> dict:
        skip = ("teams", "units")
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in skip}
        out["worse_off_teams"] = list(self.worse_off_teams)
        out["teams"] = {t: o.as_dict() for t, o in self.teams.items()}
        out["units"] = {u: o.as_dict() for u, o in self.units.items()}
        return out


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values), as the replay's own figures."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True, slots=True)
class _Job:
    job_id: int
    submit: float
    duration: float
    gpus: int
    pools: tuple  # quota keys of the team it may run on alone
    end: float | None  # in the shared replay
    first_start: float | None
    within_guarantee: bool
    room_wait: float = 0.0  # seconds waited with the team's unused guarantee fitting it
    # after the team's waiting jobs ahead of it (``room_clock``)


def alone_jct(jobs: list[_Job], pools: dict[tuple, int]) -> dict[int, float]:
    """JCT of each job replayed alone on ``pools`` (quota key -> guaranteed GPUs): greedy FIFO,
    at every arrival or end the earliest-submitted queued job that fits starts, until none
    fits. Counts GPUs only (no nodes): the team's own GPUs, as a pool. Every job must fit its
    largest pool."""
    # Queued jobs in buckets of one shape (GPUs, pools), each in submit order: the next job to
    # start is the earliest head among the shapes that fit.
    arrivals = sorted(jobs, key=lambda j: (j.submit, j.job_id))
    free = dict(pools)
    buckets: dict[tuple, list] = defaultdict(list)
    ends: list[tuple[float, tuple, int]] = []
    jct: dict[int, float] = {}
    i, n = 0, len(arrivals)
    while i < n or ends:
        now = min(arrivals[i].submit if i < n else math.inf, ends[0][0] if ends else math.inf)
        while ends and ends[0][0] <= now:
            _, key, gpus = heapq.heappop(ends)
            free[key] += gpus
        while i < n and arrivals[i].submit <= now:
            job = arrivals[i]
            heapq.heappush(buckets[(job.gpus, job.pools)], (job.submit, job.job_id, job))
            i += 1
        while True:
            best = None
            for (gpus, keys), queue in buckets.items():
                if queue and (best is None or queue[0][:2] < best[0][:2]):
                    key = next((k for k in keys if free[k] >= gpus), None)
                    if key is not None:
                        best = (queue[0], (gpus, keys), key)
            if best is None:
                break
            (_, _, job), shape, key = best
            heapq.heappop(buckets[shape])
            free[key] -= job.gpus
            heapq.heappush(ends, (now + job.duration, key, job.gpus))
            jct[job.job_id] = now + job.duration - job.submit
    return jct


def _team_jobs(result, book: QuotaBook, models: list[str]) -> dict[str, list[_Job]]:
    from apps.jobs.scheduler.replay import JOB_COLUMNS

    at = {name: k for k, name in enumerate(JOB_COLUMNS)}
    by_team: dict[str, list[_Job]] = defaultdict(list)
    for row in result.job_rows:
        team = row[at["team"]]
        # The keys a job may run on alone: of its model's, or for a job of any model, every one.
        named = row[at["model"]]
        keys = sorted({book.key(team, m) for m in ([named] if named else models)}, key=str)
        by_team[team].append(
            _Job(row[at["job_id"]], row[at["submit"]], row[at["duration"]], row[at["gpus"]],
                 tuple(keys), row[at["end"]], row[at["first_start"]],
                 bool(row[at["within_guarantee"]]), row[at["guarantee_room_wait"]])
        )  # fmt: skip
    return by_team


def team_metrics(result, quotas: list[TeamQuota], units=None) -> TeamMetrics:
    """The guarantee wait, sharing incentive and finish-time fairness of a replay (``result``, a
    ``ReplayResult``) under the ``quotas`` it ran with, per team and, with ``units``
    (``quota_file.OrgUnits``: rows and tree), per unit. See the module docstring for the
    definitions."""
    book = QuotaBook(quotas)
    models = result.models
    teams: dict[str, TeamOutcome] = {}
    all_waits: list[float] = []
    all_rho: list[float] = []
    all_room: list[float] = []
    details: dict[str, tuple[list[float], list[tuple[float, float | None]]]] = {}
    for team, jobs in sorted(_team_jobs(result, book, models).items()):
        outcome, waits, rhos, pairs = _team_outcome(team, jobs, book, models)
        teams[team] = outcome
        details[team] = (waits, pairs)
        all_waits.extend(waits)
        all_rho.extend(rhos)
        all_room.extend(j.room_wait for j in jobs if j.room_wait > 0)
    tree = units.tree if units is not None else None
    return TeamMetrics(
        units=unit_outcomes(tree, teams, details) if tree is not None else {},
        teams=teams,
        within_guarantee_jobs=len(all_waits),
        guarantee_wait_p50=percentile(all_waits, 0.5),
        guarantee_wait_p99=percentile(all_waits, 0.99),
        guarantee_wait_max=max(all_waits, default=0.0),
        guarantee_wait_late_share=_share(all_waits, WAIT_LIMIT_SECONDS),
        worse_off_teams=tuple(t for t, o in teams.items() if o.worse_off),
        worst_rho=max(all_rho, default=None),
        rho_late_share=_share(all_rho, RHO_TOLERANCE),
        **_room_figures(all_room),
    )


def _room_figures(room: list[float]) -> dict:
    return {
        "room_wait_jobs": len(room),
        "room_wait_p99": percentile(room, 0.99),
        "room_wait_max": max(room, default=0.0),
        "room_wait_late_share": _share(room, WAIT_LIMIT_SECONDS),
    }


def _share(values: list[float], above: float) -> float:
    return sum(1 for v in values if v > above) / len(values) if values else 0.0


def _team_outcome(team: str, jobs: list[_Job], book: QuotaBook, models: list[str]):
    keys = sorted({book.key(team, m) for m in models}, key=str)
    pools = {k: book.guaranteed(k) for k in keys}
    waits = [
        j.first_start - j.submit for j in jobs if j.within_guarantee and j.first_start is not None
    ]
    compared = [
        j for j in jobs if j.end is not None and j.gpus <= max(pools.get(k, 0) for k in j.pools)
    ]
    finished = [j.end - j.submit for j in jobs if j.end is not None]
    alone = alone_jct(compared, pools) if compared else {}
    shared_avg = sum(j.end - j.submit for j in compared) / len(compared) if compared else 0.0
    alone_avg = sum(alone.values()) / len(alone) if alone else None
    rhos = [(j.end - j.submit) / alone[j.job_id] for j in compared if alone.get(j.job_id)]
    pairs = [(j.end - j.submit, alone.get(j.job_id)) for j in compared]
    outcome = TeamOutcome(
        team=team,
        jobs=len(jobs),
        jct=sum(finished) / len(finished) if finished else 0.0,
        guaranteed=sum(pools.values()),
        within_guarantee_jobs=len(waits),
        guarantee_wait_p50=percentile(waits, 0.5),
        guarantee_wait_p99=percentile(waits, 0.99),
        guarantee_wait_max=max(waits, default=0.0),
        guarantee_wait_late_share=_share(waits, WAIT_LIMIT_SECONDS),
        compared_jobs=len(compared),
        jct_shared=shared_avg,
        jct_alone=alone_avg,
        worse_off=alone_avg is not None and shared_avg > alone_avg + WORSE_OFF_MARGIN_SECONDS,
        worst_rho=max(rhos, default=None),
        rho_late_share=_share(rhos, RHO_TOLERANCE),
        **_room_figures([j.room_wait for j in jobs if j.room_wait > 0]),
    )
    return outcome, waits, rhos, pairs


def unit_outcomes(tree, teams: dict[str, TeamOutcome], details: dict) -> dict[str, UnitOutcome]:
    """Per unit of ``tree`` (parents first, then by name), the figures of every team below it:
    ``details`` holds each team's guarantee waits and (shared, alone) JCT of compared jobs."""
    out: dict[str, UnitOutcome] = {}
    units = sorted(tree.parents, key=lambda u: ([str(p) for p in tree.path(u)]))
    for unit in units:
        below = sorted(t for t in tree.teams_under(unit) if t in teams)
        waits = [w for t in below for w in details[t][0]]
        pairs = [p for t in below for p in details[t][1]]
        alone = [a for _, a in pairs if a is not None]
        shared = sum(s for s, _ in pairs) / len(pairs) if pairs else 0.0
        alone_avg = sum(alone) / len(alone) if alone else None
        out[str(unit)] = UnitOutcome(
            unit=str(unit),
            teams=tuple(below),
            jobs=sum(teams[t].jobs for t in below),
            within_guarantee_jobs=len(waits),
            guarantee_wait_p50=percentile(waits, 0.5),
            guarantee_wait_p99=percentile(waits, 0.99),
            guarantee_wait_late_share=_share(waits, WAIT_LIMIT_SECONDS),
            compared_jobs=len(pairs),
            jct_shared=shared,
            jct_alone=alone_avg,
            worse_off=alone_avg is not None and shared > alone_avg + WORSE_OFF_MARGIN_SECONDS,
            worse_off_teams=tuple(t for t in below if teams[t].worse_off),
        )
    return out


def compare_teams(before: TeamMetrics, after: TeamMetrics) -> dict[str, dict]:
    """Which teams a change (of quotas, of policy) leaves better or worse off: per team its
    average JCT before and after and ``change``: "worse" when it grows by more than 5 %,
    "better" when it falls by more than 5 %, else "same"; beside it whether the team is worse
    off than alone, its guarantee wait p99 and worst rho, before and after (times in hours)."""
    out = {}
    for team in sorted(set(before.teams) | set(after.teams)):
        b, a = before.teams.get(team), after.teams.get(team)
        jct_b, jct_a = (b.jct if b else 0.0), (a.jct if a else 0.0)
        if jct_a > jct_b * RHO_TOLERANCE:
            change = "worse"
        elif jct_a * RHO_TOLERANCE < jct_b:
            change = "better"
        else:
            change = "same"
        row = {
            "team": team,
            "change": change,
            "jct_before_h": jct_b / 3600,
            "jct_after_h": jct_a / 3600,
        }
        for label, o in (("before", b), ("after", a)):
            row[f"worse_off_than_alone_{label}"] = bool(o and o.worse_off)
            row[f"guarantee_wait_p99_{label}_h"] = o.guarantee_wait_p99 / 3600 if o else 0.0
            row[f"guarantee_wait_late_share_{label}"] = o.guarantee_wait_late_share if o else 0.0
            row[f"worst_rho_{label}"] = o.worst_rho if o else None
        out[team] = row
    return out


def format_team_metrics(metrics: dict[str, TeamMetrics]) -> str:
    """Per policy: the overall guarantee wait, teams worse off and rho, then one line per team
    (hours)."""
    lines = []
    for name, m in metrics.items():
        worst = f"{m.worst_rho:.2f}" if m.worst_rho is not None else "-"
        lines.append(
            f"  {name}: guarantee wait p50 {m.guarantee_wait_p50 / 60:.1f} min, p99 "
            f"{m.guarantee_wait_p99 / 60:.1f} min, worst {m.guarantee_wait_max / 3600:.1f} h, "
            f"> 30 min {m.guarantee_wait_late_share:.1%} of {m.within_guarantee_jobs:,} jobs; "
            f"teams worse off than alone {len(m.worse_off_teams)}"
            + (f" ({', '.join(m.worse_off_teams)})" if m.worse_off_teams else "")
            + f"; rho worst {worst}, > 1.05 {m.rho_late_share:.1%}"
        )
        lines.append(
            f"    time waited with the team's unused guarantee fitting the job after the team's "
            f"jobs ahead of it: p99 "
            f"{m.room_wait_p99 / 60:.1f} min, worst {m.room_wait_max / 3600:.1f} h, > 30 min "
            f"{m.room_wait_late_share:.1%} of {m.room_wait_jobs:,} jobs"
        )
        lines.append(
            "    team            jobs  in-guar  wait p50 m  p99 m  >30m  | JCT shared h  "
            "alone h  worse | rho worst  >1.05 | in room  p99 m  worst h"
        )
        for o in m.teams.values():
            alone = f"{o.jct_alone / 3600:8.2f}" if o.jct_alone is not None else "       -"
            rho = f"{o.worst_rho:9.2f}" if o.worst_rho is not None else "        -"
            lines.append(
                f"    {o.team[:14]:14s} {o.jobs:6,} {o.within_guarantee_jobs:8,} "
                f"{o.guarantee_wait_p50 / 60:10.1f} {o.guarantee_wait_p99 / 60:6.1f} "
                f"{o.guarantee_wait_late_share:5.0%} | {o.jct_shared / 3600:12.2f} {alone} "
                f"{'  yes' if o.worse_off else '   no'} | {rho} {o.rho_late_share:6.1%} | "
                f"{o.room_wait_jobs:7,} {o.room_wait_p99 / 60:6.1f} {o.room_wait_max / 3600:8.1f}"
            )
        if m.units:
            lines.append(
                "    unit            teams  jobs  in-guar  wait p50 m  p99 m  >30m  | "
                "JCT shared h  alone h  worse"
            )
        for u in m.units.values():
            alone = f"{u.jct_alone / 3600:8.2f}" if u.jct_alone is not None else "       -"
            lines.append(
                f"    {u.unit[:14]:14s} {len(u.teams):6} {u.jobs:6,} {u.within_guarantee_jobs:8,} "
                f"{u.guarantee_wait_p50 / 60:10.1f} {u.guarantee_wait_p99 / 60:6.1f} "
                f"{u.guarantee_wait_late_share:5.0%} | {u.jct_shared / 3600:12.2f} {alone} "
                f"{'  yes' if u.worse_off else '   no'}"
            )
    return "\n".join(lines)
