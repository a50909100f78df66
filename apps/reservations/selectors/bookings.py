"""Reads of bookings: what a user may see, the bookings on GPUs, what became of a booking's GPUs."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.fleet.choices import PowerState
from apps.fleet.models import Gpu, MaintenanceWindow
from apps.reservations.holdings import bookings_holding
from apps.reservations.models import Reservation, ReservationGpu
from portal import queries


def reservation_list(*, user) -> QuerySet[Reservation]:
    """Reservations of the user's teams (all teams for finance and platform admins)."""
    return Reservation.objects.for_user(user).select_related("team", "gpu_model", "created_by")


def open_reservations_on_gpus(*, gpu_ids, now: datetime) -> QuerySet[ReservationGpu]:
    """The booking holdings of the GPUs from ``now`` on (still running or ahead)."""
    return bookings_holding(now, gpu_ids=gpu_ids).select_related(
        "reservation", "reservation__team", "gpu"
    )


def with_figures(reservations) -> list[Reservation]:
    """The bookings, each with `figures`: what higher apps add through the
    `reservations.figures` hook (efficiency, cost so far), {} when nothing answers; one answer
    per subscriber for the whole list."""
    reservations = list(reservations)
    figures = queries.ask_merged("reservations.figures", reservations=reservations)
    for reservation in reservations:
        reservation.figures = figures.get(reservation.pk, {})
    return reservations


@dataclass(frozen=True)
class HoldingChange:
    """What happened to one of a booking's GPUs when it left service: moved to another GPU
    (`moved`), or stranded on it because no other GPU was free."""

    moved: bool
    gpu: Gpu  # where the booking is now (moved) or the GPU that left service (stranded)
    moved_from: Gpu | None
    at: datetime
    reason: str


def holding_changes(*, reservation: Reservation, now: datetime | None = None) -> dict:
    """The booking's GPUs that left service: `moved` (each to its new GPU) and `stranded`
    (left on a GPU out of service, while the holding lasts and the GPU is still out of
    service for it), and whether any GPU is left in
    service for the rest of the booking (`none_left`)."""
    now = now or timezone.now()
    rows = list(
        ReservationGpu.objects.filter(reservation=reservation, active=True)
        .filter(Q(moved_from__isnull=False) | Q(stranded=True, end__gt=now))
        .select_related("gpu__node", "moved_from__node")
        .order_by("changed_at", "gpu__node__hostname", "gpu__index")
    )
    moved = [
        HoldingChange(True, r.gpu, r.moved_from, r.changed_at, r.change_reason)
        for r in rows
        if r.moved_from_id
    ]
    # A stranded holding is news only while its GPU is still out of service for it: back in
    # service (undrained, the maintenance window cancelled), the booking has it again.
    # A powered-down node still serves its bookings (it is woken for them), unless it failed
    # to power on.
    in_service = set(
        Gpu.objects.in_service()
        .exclude(node__power_state=PowerState.RESUME_FAILED)
        .filter(pk__in=[r.gpu_id for r in rows if r.stranded])
        .values_list("pk", flat=True)
    )
    stranded = [
        HoldingChange(False, r.gpu, None, r.changed_at, r.change_reason)
        for r in rows
        if r.stranded
        and (
            r.gpu_id not in in_service
            or MaintenanceWindow.objects.filter(
                node_id=r.gpu.node_id, start__lt=r.end, end__gt=r.start
            ).exists()
        )
    ]
    none_left = bool(stranded) and not (
        bookings_holding(now)
        .filter(reservation=reservation)
        .exclude(gpu_id__in=[c.gpu.pk for c in stranded])
        .exists()
    )
    return {"moved": moved, "stranded": stranded, "none_left": none_left}
