"""Bookings and jobs per GPU over the window (the occupancy Gantt)."""

from django.db.models import Q
from django.utils import timezone

from apps.dashboards.selectors.filters import Filters
from apps.jobs.models import JobAllocation
from apps.reservations.choices import ReservationStatus
from apps.reservations.models import ReservationGpu


def occupancy(filters: Filters) -> list[dict]:
    """Bookings and jobs on each GPU in the window, for the user's visible teams."""
    items = []
    holdings = ReservationGpu.objects.filter(
        active=True,
        start__lt=filters.end,
        end__gt=filters.start,
        reservation__team_id__in=filters.team_ids,
    ).exclude(reservation__status=ReservationStatus.CANCELLED)
    if filters.gpu_model:
        holdings = holdings.filter(gpu__model=filters.gpu_model)
    for h in holdings.select_related("gpu__node", "reservation__team")[:5000]:
        items.append(
            {
                "gpu": str(h.gpu),
                "kind": "booking",
                "team": h.reservation.team.slug,
                "label": f"booking #{h.reservation_id}",
                "start": max(h.start, filters.start),
                "end": min(h.end, filters.end),
            }
        )
    now = timezone.now()
    allocations = JobAllocation.objects.filter(
        Q(end__isnull=True) | Q(end__gt=filters.start),
        start__lt=filters.end,
        job__team_id__in=filters.team_ids,
    )
    if filters.gpu_model:
        allocations = allocations.filter(gpu__model=filters.gpu_model)
    for a in allocations.select_related("gpu__node", "job__team")[:5000]:
        items.append(
            {
                "gpu": str(a.gpu),
                "kind": "job",
                "team": a.job.team.slug,
                "label": f"job #{a.job_id} {a.job.name}",
                "start": max(a.start, filters.start),
                "end": min(a.end or now, filters.end),
            }
        )
    return items
