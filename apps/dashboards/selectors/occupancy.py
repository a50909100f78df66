"""Bookings and jobs per GPU over the window (the occupancy Gantt)."""

from django.utils import timezone

from apps.dashboards.selectors.filters import Filters
from apps.jobs.holdings import allocations_holding
from apps.reservations.holdings import bookings_holding


def occupancy(filters: Filters) -> list[dict]:
    """Bookings and jobs on each GPU in the window, for the user's visible teams; `team` is
    the team's slug, or with group=unit the name of the unit it is grouped under."""
    items = []
    holdings = bookings_holding(filters.start, filters.end).filter(
        reservation__team_id__in=filters.team_ids
    )
    if filters.gpu_model:
        holdings = holdings.filter(gpu__model=filters.gpu_model)
    for h in holdings.select_related("gpu__node", "reservation__team")[:5000]:
        items.append(
            {
                "gpu": str(h.gpu),
                "kind": "booking",
                "team": filters.label(h.reservation.team.slug),
                "label": f"booking #{h.reservation_id}",
                "start": max(h.start, filters.start),
                "end": min(h.end, filters.end),
            }
        )
    now = timezone.now()
    allocations = allocations_holding(filters.start, filters.end).filter(
        job__team_id__in=filters.team_ids
    )
    if filters.gpu_model:
        allocations = allocations.filter(gpu__model=filters.gpu_model)
    for a in allocations.select_related("gpu__node", "job__team")[:5000]:
        items.append(
            {
                "gpu": str(a.gpu),
                "kind": "job",
                "team": filters.label(a.job.team.slug),
                "label": f"job #{a.job_id} {a.job.name}",
                "start": max(a.start, filters.start),
                "end": min(a.end or now, filters.end),
            }
        )
    return items
