"""Moving bookings off GPUs that leave service (drained, retired, or in a maintenance window):
each open booking's remaining time goes to another free GPU of its model, or its team is told.
Fleet reaches this through the `gpus.leaving_service` hook."""

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.reservations import availability, selectors
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.services import notify_team
from portal.formatting import format_when

logger = logging.getLogger(__name__)


def reservations_relocate_off_gpus(
    *, gpu_ids: list[int], actor, during: tuple[datetime, datetime] | None = None
) -> dict:
    """After GPUs leave service (for good, or `during` a maintenance window): move each open
    booking's remaining time on them to another free GPU of its model; tell the team when none
    is free. Returns what moved and what could not."""
    now = timezone.now()
    report: dict[str, list[dict]] = {"moved": [], "unresolved": []}
    lost: dict[int, tuple[Reservation, list[str]]] = {}
    affected = selectors.open_reservations_on_gpus(gpu_ids=gpu_ids, now=now)
    if during is not None:
        affected = affected.filter(start__lt=during[1], end__gt=during[0])
    for holding in affected.order_by("start", "id"):
        reservation = holding.reservation
        # whole minutes, so the cut-off holding and its replacement meet exactly
        window_start = availability.from_epoch(
            availability.ceil_to_grid(availability.to_epoch_ceil(max(holding.start, now)), 60)
        )
        free = (
            [
                g
                for g in selectors.schedulable_gpus(
                    gpu_model=reservation.gpu_model, free_from=window_start, free_until=holding.end
                )
                if g.id not in gpu_ids
            ]
            if window_start < holding.end
            else []
        )
        entry = {
            "reservation": reservation.pk,
            "team": reservation.team.slug,
            "gpu": str(holding.gpu),
        }
        if not free:
            report["unresolved"].append(entry)
            lost.setdefault(reservation.pk, (reservation, []))[1].append(str(holding.gpu))
            continue
        replacement = availability.pick_gpus(free, 1, same_node=False)[0]
        with transaction.atomic():
            if holding.start < window_start:
                ReservationGpu.objects.filter(pk=holding.pk).update(end=window_start)
            else:
                ReservationGpu.objects.filter(pk=holding.pk).update(active=False)
            ReservationGpu.objects.create(
                reservation=reservation, gpu_id=replacement.id, start=window_start, end=holding.end
            )
        entry["moved_to"] = f"{replacement.node}/gpu{replacement.index}"
        report["moved"].append(entry)
        audit_record(
            actor=actor,
            action="reservation.relocate",
            target=reservation,
            before={"gpu": entry["gpu"]},
            after={"gpu": entry["moved_to"]},
            reason="GPU taken out of service",
        )
    _notify_moved(report["moved"])
    for reservation, gpus in lost.values():
        notify_team(
            reservation,
            f"GPU reservation #{reservation.pk} lost {len(gpus)} GPU(s)",
            f"{', '.join(gpus)} left service and no other {reservation.gpu_model.name} GPU is "
            f"free until {format_when(reservation.end)}. Your booking keeps the rest.\n",
        )
    return report


def _notify_moved(moved: list[dict]) -> None:
    """Tell each moved booking's team where its GPUs are now: one mail per reservation."""
    by_reservation: dict[int, list[dict]] = {}
    for entry in moved:
        by_reservation.setdefault(entry["reservation"], []).append(entry)
    reservations = Reservation.objects.select_related("created_by", "gpu_model").in_bulk(
        list(by_reservation)
    )
    for pk, entries in by_reservation.items():
        reservation = reservations[pk]
        nodes = sorted({entry["moved_to"].split("/", 1)[0] for entry in entries})
        lines = "".join(f"  {entry['gpu']} -> {entry['moved_to']}\n" for entry in entries)
        notify_team(
            reservation,
            f"GPU reservation #{pk} moved to {', '.join(nodes)}",
            f"{len(entries)} GPU(s) of your booking #{pk} ({reservation.gpu_model.name}, "
            f"{format_when(reservation.start)} - {format_when(reservation.end)}) left "
            f"service, so the booking now uses other GPUs of the same model:\n{lines}"
            "Point your jobs at the new node; the booking's times are unchanged.\n",
        )
