"""Bookings and jobs per GPU over the window (the occupancy Gantt)."""

from django.utils import timezone

from apps.dashboards.selectors.filters import Filters
from apps.jobs.holdings import allocations_holding
from apps.reservations.holdings import bookings_holding

# What a GPU is called on the chart (`Gpu.__str__`), read as columns: building the GPU, node,
# booking and team of 5,000 bars as model instances took about 0.3 s of CPU.
GPU_COLUMNS = ("gpu__node__hostname", "gpu__index", "gpu__mig_parent_id", "gpu__mig_profile")


def _gpu_name(hostname: str, index: int, mig_parent_id: int | None, mig_profile: str) -> str:
    return f"{hostname}/gpu{index}" + (f" MIG {mig_profile}" if mig_parent_id else "")


def occupancy(filters: Filters) -> list[dict]:
    """Bookings and jobs on each GPU in the window, for the user's visible teams; `team` is
    the team's slug, or with group=unit the name of the unit it is grouped under."""
    items = []
    holdings = bookings_holding(filters.start, filters.end).filter(
        reservation__team_id__in=filters.team_ids
    )
    if filters.gpu_model:
        holdings = holdings.filter(gpu__model=filters.gpu_model)
    for *gpu, slug, reservation_id, start, end in holdings.values_list(
        *GPU_COLUMNS, "reservation__team__slug", "reservation_id", "start", "end"
    )[:5000]:
        items.append(
            {
                "gpu": _gpu_name(*gpu),
                "kind": "booking",
                "team": filters.label(slug),
                "label": f"booking #{reservation_id}",
                "start": max(start, filters.start),
                "end": min(end, filters.end),
            }
        )
    now = timezone.now()
    allocations = allocations_holding(filters.start, filters.end).filter(
        job__team_id__in=filters.team_ids
    )
    if filters.gpu_model:
        allocations = allocations.filter(gpu__model=filters.gpu_model)
    for *gpu, slug, job_id, name, start, end in allocations.values_list(
        *GPU_COLUMNS, "job__team__slug", "job_id", "job__name", "start", "end"
    )[:5000]:
        items.append(
            {
                "gpu": _gpu_name(*gpu),
                "kind": "job",
                "team": filters.label(slug),
                "label": f"job #{job_id} {name}",
                "start": max(start, filters.start),
                "end": min(end or now, filters.end),
            }
        )
    return items
