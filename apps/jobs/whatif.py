"""What-if: replay the recent real job history on today's fleet under the current quotas and
under proposed ones, with the same scheduler the portal runs, and compare each team's wait and
cost. Reads only; nothing is changed."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings

from apps.fleet.models import Gpu
from apps.jobs.models import Job
from apps.jobs.scheduler.replay import ReplayResult, TraceJob, simulate
from apps.jobs.scheduler.state import GpuInfo, TeamQuota
from apps.teams.models import Quota
from portal import hooks

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
                same_node=job.same_node,
            )
        )
    return jobs


def fleet_now() -> list[GpuInfo]:
    gpus = Gpu.objects.schedulable().filter(mig_parent__isnull=True).select_related("node", "model")
    return [GpuInfo(g.pk, g.node.hostname, g.model.name, g.nvlink_domain or None) for g in gpus]


def _team_quotas(proposals: list[QuotaProposal]) -> list[TeamQuota]:
    return [TeamQuota(p.team, p.model, p.guaranteed, p.limit) for p in proposals]


def _cost(result: ReplayResult, team: str, at: datetime) -> Decimal | None:
    """Price of the team's replayed GPU-hours, from whoever answers the `gpu_hours.price` hook
    (billing: rate cards, over-quota hours at the multiplier); None without prices."""
    hours = result.team_model_gpu_hours.get(team, {})
    answers = [a for a in hooks.emit("gpu_hours.price", hours_by_model=hours, at=at) if a]
    return answers[0] if answers else None


def what_if(
    *, proposed: list[QuotaProposal], window: timedelta, policy: str, now: datetime
) -> dict:
    """Both replays and a per-team comparison (hours of wait, GPU-hours, cost)."""
    history = job_history(since=now - window, until=now)
    gpus = fleet_now()
    if not history or not gpus:
        return {"jobs": len(history), "gpus": len(gpus), "teams": []}
    before = simulate(history, gpus, _team_quotas(current_quotas()), policy)
    after = simulate(history, gpus, _team_quotas(proposed), policy)
    teams = sorted({job.team for job in history})
    rows = []
    for team in teams:
        rows.append(
            {
                "team": team,
                "jobs": sum(1 for job in history if job.team == team),
                "wait_before_h": before.team_avg_wait.get(team, 0.0) / 3600,
                "wait_after_h": after.team_avg_wait.get(team, 0.0) / 3600,
                "gpu_hours_before": before.team_gpu_hours.get(team, 0.0),
                "gpu_hours_after": after.team_gpu_hours.get(team, 0.0),
                "cost_before": _cost(before, team, now),
                "cost_after": _cost(after, team, now),
            }
        )
    return {
        "jobs": len(history),
        "gpus": len(gpus),
        "teams": rows,
        "before": before,
        "after": after,
        "currency": settings.BILLING_CURRENCY,
        "too_few_jobs": len(history) < MIN_JOBS,
        "min_jobs": MIN_JOBS,
        # Nobody waited under either set: the averages are all zero and compare nothing.
        "nobody_waited": not any(row["wait_before_h"] or row["wait_after_h"] for row in rows),
    }
