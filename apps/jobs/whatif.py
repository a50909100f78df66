"""What-if: replay the recent real job history on today's fleet under the current quotas and
under proposed ones, with the same scheduler the portal runs, and compare each team's wait and
cost. The replays change nothing; a run records what was asked and what it found."""

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.fleet.models import Gpu
from apps.jobs.choices import WhatIfStatus
from apps.jobs.dispatch import gpu_info
from apps.jobs.models import Job, WhatIfRun
from apps.jobs.scheduler.quota_file import OrgUnits
from apps.jobs.scheduler.replay import JOB_COLUMNS, ReplayResult, TraceJob, simulate
from apps.jobs.scheduler.state import GpuInfo, TeamQuota
from apps.jobs.scheduler.team_metrics import TeamMetrics, compare_teams, team_metrics
from apps.jobs.whatif_power import power_comparison
from apps.outbox.services import outbox_send_task
from apps.teams.models import OrgUnit, Quota
from apps.teams.selectors import quota_org_tree, unit_quota_rows
from portal import queries

WINDOWS = {"7d": timedelta(days=7), "30d": timedelta(days=30)}
# Fewer jobs than this say nothing about how quotas shape waits; the page says so instead of
# comparing averages of a handful of jobs.
MIN_JOBS = 5


@dataclass(frozen=True)
class QuotaProposal:
    team: str
    model: str | None
    guaranteed: int
    limit: int


def current_quotas() -> list[QuotaProposal]:
    return [
        QuotaProposal(q.team.slug, q.gpu_model.name if q.gpu_model else None, q.guaranteed, q.limit)
        for q in Quota.objects.select_related("team", "gpu_model").order_by(
            "team__slug", "gpu_model__name"
        )
    ]


def job_history(*, since: datetime, until: datetime) -> list[TraceJob]:
    """Jobs submitted in the window, as trace jobs: how long each ran (or may run)."""
    jobs = []
    rows = (
        Job.objects.filter(submitted_at__gte=since, submitted_at__lt=until)
        .select_related("team", "gpu_model")
        .order_by("submitted_at", "pk")
    )
    for job in rows:
        if job.started_at and job.finished_at and job.finished_at > job.started_at:
            duration = (job.finished_at - job.started_at).total_seconds()
        else:
            duration = float(job.max_runtime_seconds)
        jobs.append(
            TraceJob(
                job_id=job.pk,
                submit=job.submitted_at.timestamp(),
                duration=duration,
                gpus=job.gpu_count,
                team=job.team.slug,
                model=job.gpu_model.name if job.gpu_model else None,
                max_runtime=float(job.max_runtime_seconds),  # the limit its user gave
                same_node=job.same_node,
                user=str(job.submitted_by_id) if job.submitted_by_id else None,
            )
        )
    return jobs


def fleet_now() -> list[GpuInfo]:
    gpus = Gpu.objects.in_service().filter(mig_parent__isnull=True).select_related("node", "model")
    return [gpu_info(g) for g in gpus]


def _team_quotas(proposals: list[QuotaProposal]) -> list[TeamQuota]:
    return [TeamQuota(p.team, p.model, p.guaranteed, p.limit) for p in proposals]


def _cost(result: ReplayResult, team: str, at: datetime) -> Decimal | None:
    """Price of the team's replayed GPU-hours, from whoever answers the `gpu_hours.price` query
    (billing: rate cards, over-quota hours at the multiplier); None without prices."""
    hours = result.team_model_gpu_hours.get(team, {})
    answers = [a for a in queries.ask("gpu_hours.price", hours_by_model=hours, at=at) if a]
    return answers[0] if answers else None


def _lost_gpu_hours(result: ReplayResult) -> dict[str, float]:
    """GPU-hours each team lost to preemption (attempts restarted from the beginning)."""
    lost: dict[str, float] = {}
    team_at, lost_at = JOB_COLUMNS.index("team"), JOB_COLUMNS.index("gpu_seconds_lost")
    for row in result.job_rows:
        lost[row[team_at]] = lost.get(row[team_at], 0.0) + row[lost_at] / 3600
    return lost


def _summary(result: ReplayResult) -> dict:
    return {
        "avg_wait_h": result.avg_wait / 3600,
        "p95_wait_h": result.p95_wait / 3600,
        "avg_slowdown": result.avg_slowdown,
        "jain_fairness": result.jain_fairness,
        "preemptions": result.preemptions,
        "gpu_hours_lost": result.gpu_hours_lost,
        "never_fit": result.never_fit,
    }


def _overall(metrics) -> dict:
    return {
        "guarantee_wait_p50_h": metrics.guarantee_wait_p50 / 3600,
        "guarantee_wait_p99_h": metrics.guarantee_wait_p99 / 3600,
        "guarantee_wait_late_share": metrics.guarantee_wait_late_share,
        "teams_worse_off_than_alone": list(metrics.worse_off_teams),
        "worst_rho": metrics.worst_rho,
        "rho_late_share": metrics.rho_late_share,
    }


def _money(amount: Decimal | None) -> str | None:
    # Kept as text so that a stored result prices exactly what was computed.
    return None if amount is None else str(amount)


def what_if(
    *,
    proposed: list[QuotaProposal],
    window: timedelta,
    policy: str,
    now: datetime,
    progress: Callable[[int], None] = lambda percent: None,
    power_saving: dict | None = None,
) -> dict:
    """Both replays and a per-team comparison: average and p95 wait, average slowdown,
    GPU-hours run and lost to preemption, cost; and what teams care about
    (``team_metrics.compare_teams``): whether the proposal leaves the team better or worse off
    (``change``), worse off than alone on its guaranteed GPUs, its guarantee wait p99 and worst
    finish-time fairness rho, before and after; overall (``guarantee``) the same figures over
    all teams, and Jain fairness over per-team slowdown as context. JSON-safe (costs as
    decimal strings), so that a run can store it. `progress(percent)` is told how far it got.
    With ``power_saving`` (``whatif_power.power_saving_from``), ``power`` compares the proposal
    replayed with power saving against it always on (``whatif_power.power_comparison``)."""
    history = job_history(since=now - window, until=now)
    gpus = fleet_now()
    if not history or not gpus:
        return {"jobs": len(history), "gpus": len(gpus), "teams": []}
    progress(10)
    step = 40 if power_saving is None else 27  # percent per replay
    quotas_before, quotas_after = _team_quotas(current_quotas()), _team_quotas(proposed)
    units = org_units()
    before = simulate(
        history, gpus, quotas_before, policy, units=units,
        progress=lambda done: progress(10 + int(step * done)),
    )  # fmt: skip
    progress(10 + step)
    after = simulate(
        history, gpus, quotas_after, policy, units=units,
        progress=lambda done: progress(10 + step + int(step * done)),
    )  # fmt: skip
    power = None
    if power_saving is not None:
        progress(10 + 2 * step)
        power = power_comparison(
            history=history, gpus=gpus, quotas=quotas_after, policy=policy, always_on=after,
            options=power_saving, at=now,
            progress=lambda done: progress(10 + 2 * step + int(step * done)),
        )  # fmt: skip
    progress(90)
    lost_before, lost_after = _lost_gpu_hours(before), _lost_gpu_hours(after)
    metrics_before, metrics_after = (
        team_metrics(before, quotas_before, units),
        team_metrics(after, quotas_after, units),
    )
    changes = compare_teams(metrics_before, metrics_after)
    teams = sorted({job.team for job in history})
    rows = []
    for team in teams:
        rows.append(
            {
                "team": team,
                "jobs": sum(1 for job in history if job.team == team),
                "wait_before_h": before.team_avg_wait.get(team, 0.0) / 3600,
                "wait_after_h": after.team_avg_wait.get(team, 0.0) / 3600,
                "p95_wait_before_h": before.team_p95_wait.get(team, 0.0) / 3600,
                "p95_wait_after_h": after.team_p95_wait.get(team, 0.0) / 3600,
                "slowdown_before": before.team_avg_slowdown.get(team, 0.0),
                "slowdown_after": after.team_avg_slowdown.get(team, 0.0),
                "lost_gpu_hours_before": lost_before.get(team, 0.0),
                "lost_gpu_hours_after": lost_after.get(team, 0.0),
                "gpu_hours_before": before.team_gpu_hours.get(team, 0.0),
                "gpu_hours_after": after.team_gpu_hours.get(team, 0.0),
                "cost_before": _money(_cost(before, team, now)),
                "cost_after": _money(_cost(after, team, now)),
            }
            | changes.get(team, {})
        )
    return {
        "jobs": len(history),
        "gpus": len(gpus),
        "teams": rows,
        "before": _summary(before),
        "after": _summary(after),
        "guarantee": {"before": _overall(metrics_before), "after": _overall(metrics_after)},
        "units": unit_rows(metrics_before, metrics_after),
        "power": power,
        "currency": settings.BILLING_CURRENCY,
        "too_few_jobs": len(history) < MIN_JOBS,
        "min_jobs": MIN_JOBS,
        # Nobody waited under either set: the averages are all zero and compare nothing.
        "nobody_waited": not any(row["wait_before_h"] or row["wait_after_h"] for row in rows),
    }


def org_units() -> OrgUnits:
    """The organisation units as the replays take them: the units' quota rows (which the
    proposal leaves as they are) and the tree, units and teams by slug."""
    rows, tree = unit_quota_rows()
    return OrgUnits(rows, tree or quota_org_tree())


def unit_rows(before: TeamMetrics, after: TeamMetrics) -> list[dict]:
    """Per unit (by path, root first) the guarantee wait and sharing incentive of all its
    teams together, under the current quotas and the proposal (hours)."""
    labels = dict(OrgUnit.objects.values_list("slug", "name"))
    tree = quota_org_tree()
    rows = []
    for key in before.units.keys() | after.units.keys():
        b, a = before.units.get(key), after.units.get(key)
        row = {"unit": " / ".join(labels.get(u, str(u)) for u in tree.path(key))}
        for label, o in (("before", b), ("after", a)):
            row[f"jobs_{label}"] = o.jobs if o else 0
            row[f"guarantee_wait_p50_{label}_h"] = o.guarantee_wait_p50 / 3600 if o else 0.0
            row[f"guarantee_wait_p99_{label}_h"] = o.guarantee_wait_p99 / 3600 if o else 0.0
            row[f"guarantee_wait_late_share_{label}"] = o.guarantee_wait_late_share if o else 0.0
            row[f"jct_shared_{label}_h"] = o.jct_shared / 3600 if o else 0.0
            row[f"jct_alone_{label}_h"] = (
                o.jct_alone / 3600 if o and o.jct_alone is not None else None
            )
            row[f"worse_off_than_alone_{label}"] = bool(o and o.worse_off)
        rows.append(row)
    return sorted(rows, key=lambda row: row["unit"])


def unit_table(result: dict) -> list[dict]:
    """A run's per-unit rows as the page lists them (by path: a unit under its parent), each
    with its depth below the root and its late share in percent. Empty when the organisation
    has no unit below its root (the root's row would only repeat the teams' figures together)
    or the result was stored before runs reported units."""
    rows = [
        row
        | {
            "depth": row["unit"].count(" / "),
            **{
                f"late_percent_{label}": 100 * row[f"guarantee_wait_late_share_{label}"]
                for label in ("before", "after")
            },
        }
        for row in result.get("units") or []
    ]
    return rows if any(row["depth"] for row in rows) else []


# How the page names a team's ``change`` (``team_metrics.compare_teams``), in the order it
# lists the teams: the ones a proposal hurts first.
CHANGES = {"worse": "Worse off", "better": "Better off", "same": "About the same"}


def team_changes(result: dict) -> dict | None:
    """A run's teams by what its proposal does to them: ``rows`` (worse off first, then
    better off, then about the same, each by team) and the team names of each ``change``.
    None for a result without per-team changes (stored before runs compared teams)."""
    rows = [row for row in result.get("teams", []) if row.get("change") in CHANGES]
    if not rows:
        return None
    order = list(CHANGES)
    rows = sorted(rows, key=lambda row: (order.index(row["change"]), row["team"]))
    return {
        "rows": [row | {"change_label": CHANGES[row["change"]]} for row in rows],
        **{change: [row["team"] for row in rows if row["change"] == change] for change in CHANGES},
    }


def whatif_run_start(
    *,
    actor,
    proposed: list[QuotaProposal],
    window: str,
    policy: str,
    power_saving: dict | None = None,
) -> WhatIfRun:
    """Record a what-if run and hand it to a worker once the transaction commits (through the
    outbox, so a run is never sent that was not saved, nor saved and never sent). The caller
    has checked the numbers, the window, the policy and the power-saving options."""
    with transaction.atomic():
        run = WhatIfRun.objects.create(
            window=window,
            policy=policy,
            proposed=[asdict(p) for p in proposed],
            power_saving=power_saving,
            created_by=actor,
        )
        outbox_send_task("jobs.what_if", queue=settings.CELERY_TASK_DEFAULT_QUEUE, args=[run.pk])
    return run


# A running replay writes its progress at least this often (its sign of life for the sweeper),
# and otherwise only when the percentage moves.
HEARTBEAT_SECONDS = 30.0


def whatif_run_execute(*, run_id: int, now: datetime | None = None) -> str:
    """Replay a queued run, recording progress, then the result or the error. A run already
    started or finished (a redelivered task), or failed meanwhile by the sweeper, is left
    alone. Returns the run's status."""
    claimed = WhatIfRun.objects.filter(pk=run_id, status=WhatIfStatus.QUEUED).update(
        status=WhatIfStatus.RUNNING,
        started_at=timezone.now(),
        progress=5,
        progress_at=timezone.now(),
    )
    if not claimed:
        run = WhatIfRun.objects.filter(pk=run_id).first()
        return run.status if run else "missing"
    run = WhatIfRun.objects.get(pk=run_id)
    running = WhatIfRun.objects.filter(pk=run_id, status=WhatIfStatus.RUNNING)
    last = [5, time.monotonic()]

    def progress(percent: int) -> None:
        moment = time.monotonic()
        if percent == last[0] and moment - last[1] < HEARTBEAT_SECONDS:
            return
        last[:] = [percent, moment]
        running.update(progress=percent, progress_at=timezone.now())

    try:
        result = what_if(
            proposed=[QuotaProposal(**p) for p in run.proposed],
            window=WINDOWS[run.window],
            policy=run.policy,
            now=now or run.created_at,
            progress=progress,
            power_saving=run.power_saving,
        )
    except Exception as failure:  # the page must show a failed run, not poll forever
        running.update(
            status=WhatIfStatus.FAILED, error=str(failure)[:2000], finished_at=timezone.now()
        )
        raise
    running.update(
        status=WhatIfStatus.DONE, progress=100, result=result, finished_at=timezone.now()
    )
    return WhatIfRun.objects.get(pk=run_id).status


def whatif_runs_fail_stalled(*, now: datetime | None = None) -> list[int]:
    """Mark failed the running what-if runs whose worker reported nothing for
    ``JOBS_WHATIF_STALL_MINUTES`` (it died or restarted mid-replay, and a run is never
    redelivered), so their page stops polling and says to start again. Returns their ids."""
    now = now or timezone.now()
    minutes = settings.JOBS_WHATIF_STALL_MINUTES
    cutoff = now - timedelta(minutes=minutes)
    # Runs started before progress was timed have only their start.
    silent = Q(progress_at__lt=cutoff) | Q(progress_at__isnull=True, started_at__lt=cutoff)
    stalled = WhatIfRun.objects.filter(silent, status=WhatIfStatus.RUNNING)
    with transaction.atomic():
        ids = list(stalled.select_for_update().values_list("pk", flat=True))
        WhatIfRun.objects.filter(pk__in=ids).update(
            status=WhatIfStatus.FAILED,
            finished_at=now,
            error=(
                f"The worker replaying this run stopped reporting progress for {minutes} minutes "
                "(it was probably restarted). Start the run again."
            ),
        )
    return ids
