"""One GPU's history: its activity from the rollups, who held it (bookings and jobs) and its
health events (what fleet and telemetry recorded in the audit log: health changes such as
ECC/XID errors, drains, its node going unreachable and back)."""

from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.audit.selectors import field_changes
from apps.fleet.models import Gpu
from apps.jobs.holdings import allocations_holding
from apps.jobs.models import Job
from apps.reservations.holdings import bookings_holding
from apps.reservations.models import Reservation
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup

# The windows the GPU page offers: the last day from minute rollups, the last week from hour
# rollups (168 points).
GPU_RANGES = {
    "24h": (timedelta(hours=24), GpuMinuteRollup),
    "7d": (timedelta(days=7), GpuHourRollup),
}


class GpuRangeError(ValueError):
    pass


def gpu_window(range_name: str, *, now: datetime | None = None) -> tuple[datetime, datetime]:
    if range_name not in GPU_RANGES:
        raise GpuRangeError(f"Unknown range “{range_name}”: choose one of {', '.join(GPU_RANGES)}.")
    end = now or timezone.now()
    return end - GPU_RANGES[range_name][0], end


def gpu_activity(gpu: Gpu, range_name: str, *, now: datetime | None = None) -> dict:
    """The GPU's rollup buckets over the window: utilization, SM activity (where GPM
    exists), memory used and power, one point per minute (24 h) or hour (7 d)."""
    start, end = gpu_window(range_name, now=now)
    model = GPU_RANGES[range_name][1]
    rows = list(
        model.objects.filter(gpu=gpu, bucket__gte=start, bucket__lt=end)
        .order_by("bucket")
        .values("bucket", "util_avg", "sm_active_avg", "mem_used_avg_mib", "power_avg_w")
    )
    return {"start": start, "end": end, "rows": rows}


def gpu_holders(gpu: Gpu, *, user, start: datetime, end: datetime) -> list[dict]:
    """Who held the GPU over [start, end): its bookings (those in force, not moved away) and
    job allocations, oldest first. A holder of a team the user does not see shows its team
    only (no name, no link), as on the queue page."""
    visible_reservations = set(
        Reservation.objects.for_user(user).filter(holdings__gpu=gpu).values_list("pk", flat=True)
    )
    visible_jobs = set(
        Job.objects.for_user(user).filter(allocations__gpu=gpu).values_list("pk", flat=True)
    )
    held = []
    for holding in bookings_holding(start, end, gpu_ids=[gpu.pk]).select_related(
        "reservation__team"
    ):
        reservation = holding.reservation
        held.append(
            {
                "kind": "booking",
                "id": reservation.pk,
                "team": reservation.team,
                "name": reservation.purpose if reservation.pk in visible_reservations else None,
                "visible": reservation.pk in visible_reservations,
                "start": holding.start,
                "end": holding.end,
            }
        )
    for allocation in allocations_holding(start, end, gpu_ids=[gpu.pk]).select_related("job__team"):
        job = allocation.job
        held.append(
            {
                "kind": "job",
                "id": job.pk,
                "team": job.team,
                "name": job.name if job.pk in visible_jobs else None,
                "visible": job.pk in visible_jobs,
                "start": allocation.start,
                "end": allocation.end,
            }
        )
    return sorted(held, key=lambda h: (h["start"], h["kind"], h["id"]))


def gpu_health_events(gpu: Gpu, *, start: datetime, end: datetime) -> list[AuditEvent]:
    """Changes of the GPU's and its node's state over [start, end), newest first: health
    (NVML errors, a lost GPU), drain and retire, the node unreachable and back."""
    events = list(
        AuditEvent.objects.filter(created_at__gte=start, created_at__lt=end)
        .filter(
            Q(object_type="fleet.gpu", object_id=str(gpu.pk))
            | Q(object_type="fleet.node", object_id=str(gpu.node_id))
        )
        .order_by("-created_at", "-id")
    )
    for event in events:
        event.changes = field_changes(event.before, event.after)
    return events
