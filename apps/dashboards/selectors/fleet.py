"""Fleet health (nodes, GPU health, temperature, power) and quota pressure (queued demand
against quotas)."""

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Count, Q
from django.utils import timezone

from apps.dashboards.selectors.filters import Filters
from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus
from apps.fleet.models import Gpu, Node
from apps.jobs.choices import JobStatus
from apps.jobs.models import Job
from apps.reservations.holdings import bookings_holding_at
from apps.teams.models import Quota
from apps.telemetry.models import GpuSample


def fleet_health(*, now: datetime | None = None) -> dict:
    """Nodes by status, GPUs by health, and each GPU's latest temperature and power."""
    now = now or timezone.now()
    nodes = dict(Node.objects.values_list("status").annotate(n=Count("id")).order_by())
    health = dict(
        Gpu.objects.filter(mig_parent__isnull=True)
        .exclude(status=GpuStatus.RETIRED)
        .values_list("health")
        .annotate(n=Count("id"))
        .order_by()
    )
    latest: dict[int, dict] = {}
    samples = (
        GpuSample.objects.filter(ts__gte=now - timedelta(minutes=10), ts__lte=now)
        .order_by("gpu_id", "-ts")
        .values("gpu_id", "temp_c", "power_w")
    )
    for row in samples.iterator(chunk_size=5000):
        latest.setdefault(row["gpu_id"], row)
    labels = {g.pk: str(g) for g in Gpu.objects.filter(pk__in=latest).select_related("node")}
    readings = [
        {"gpu": labels[gpu_id], "temp_c": row["temp_c"], "power_w": row["power_w"]}
        for gpu_id, row in latest.items()
        if gpu_id in labels
    ]
    readings.sort(key=lambda r: r["gpu"])
    unreported = list(
        Node.objects.exclude(status=NodeStatus.RETIRED)
        .exclude(gpus__in=list(latest))
        .values_list("hostname", flat=True)
        .distinct()
    )
    return {
        "nodes": {s.value: nodes.get(s.value, 0) for s in NodeStatus},
        "health": {h.value: health.get(h.value, 0) for h in GpuHealth},
        "readings": readings,
        "unreported": unreported,
    }


def quota_pressure(filters: Filters, *, now: datetime | None = None) -> list[dict]:
    """Per team and quota: GPUs held now, GPUs asked for by queued jobs, guaranteed and limit."""
    now = now or timezone.now()
    quotas = Quota.objects.filter(team_id__in=filters.team_ids).select_related("team", "gpu_model")
    if filters.gpu_model:
        quotas = quotas.filter(Q(gpu_model=filters.gpu_model) | Q(gpu_model__isnull=True))
    held = defaultdict(int)
    for team_id, model_id in (
        bookings_holding_at(now)
        .filter(reservation__team_id__in=filters.team_ids)
        .values_list("reservation__team_id", "gpu__model_id")
    ):
        held[(team_id, model_id)] += 1
        held[(team_id, None)] += 1
    waiting = defaultdict(int)
    for team_id, model_id, count in Job.objects.filter(
        team_id__in=filters.team_ids, status__in=[JobStatus.QUEUED, JobStatus.REQUEUED]
    ).values_list("team_id", "gpu_model_id", "gpu_count"):
        waiting[(team_id, model_id)] += count
        if model_id is not None:
            waiting[(team_id, None)] += count
    rows = []
    for q in quotas:
        key = (q.team_id, q.gpu_model_id)
        rows.append(
            {
                "team": q.team.slug,
                "gpu_model": q.gpu_model.name if q.gpu_model else "any model",
                "guaranteed": q.guaranteed,
                "limit": q.limit,
                "held": held.get(key, 0),
                "waiting": waiting.get(key, 0),
            }
        )
    return rows
