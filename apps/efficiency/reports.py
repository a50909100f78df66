"""The CSV of a team's jobs with their cost and efficiency."""

from datetime import datetime

from django.db.models import Q

from apps.efficiency.selectors import job_figures, jobs_in_window
from apps.jobs.models import Job

EFFICIENCY_FIELDS = (
    "gpu_hours",
    "busy_gpu_hours",
    "busy_percent",
    "activity_percent",
    "activity_signal",
    "memory_avg_mib",
    "memory_peak_mib",
    "memory_total_mib",
    "idle_gpus",
)
TEAM_JOB_COLUMNS = [
    "job_id",
    "name",
    "user",
    "status",
    "gpu_model",
    "gpus",
    "submitted_at",
    "started_at",
    "finished_at",
    "reservation_id",
    *EFFICIENCY_FIELDS,
    "cost",
    "estimated_cost",
    "currency",
]
BATCH = 500


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def team_job_rows(*, team, start: datetime, end: datetime):
    """One row per job of the team that held GPUs in [start, end) or was submitted then (a
    waiting job has its estimated cost), newest first, in batches (a bounded number of
    queries per batch)."""
    # One filter with OR, not a UNION: SQLite refuses a compound statement whose parts carry
    # the model's default ordering.
    held = jobs_in_window(start=start, end=end).filter(team=team).values("pk")
    ids = list(
        Job.objects.filter(team=team)
        .filter(Q(pk__in=held) | Q(submitted_at__gte=start, submitted_at__lt=end))
        .order_by("-pk")
        .values_list("pk", flat=True)
    )
    for offset in range(0, len(ids), BATCH):
        batch = list(
            Job.objects.filter(pk__in=ids[offset : offset + BATCH])
            .select_related("submitted_by", "gpu_model", "team")
            .prefetch_related("allocations")
            .order_by("-pk")
        )
        figures = job_figures(jobs=batch)
        for job in batch:
            f = figures.get(job.pk, {})
            eff = f.get("efficiency") or {}
            yield {
                "job_id": job.pk,
                "name": job.name,
                "user": job.submitted_by.username,
                "status": job.status,
                "gpu_model": job.gpu_model.name if job.gpu_model_id else eff.get("gpu_model"),
                "gpus": job.gpu_count,
                "submitted_at": _iso(job.submitted_at),
                "started_at": _iso(job.started_at),
                "finished_at": _iso(job.finished_at),
                "reservation_id": job.reservation_id,
                **{name: eff.get(name) for name in EFFICIENCY_FIELDS},
                "cost": f.get("cost"),
                "estimated_cost": f.get("estimated_cost"),
                "currency": f.get("currency"),
            }
