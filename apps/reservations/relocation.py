"""Moving bookings off GPUs that leave service (drained, retired, or in a maintenance window):
each open booking's remaining time goes to another free GPU of its model, or its team is told.
Fleet reaches this through the `gpus.leaving_service` hook."""

import logging
from datetime import datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.fleet.choices import GpuStatus, NodeStatus, PowerState
from apps.fleet.models import Gpu
from apps.reservations import availability, selectors
from apps.reservations.holdings import bookings_holding, overlap_q
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.services import notify_team
from portal.formatting import format_count, format_when

logger = logging.getLogger(__name__)


def reservations_relocate_off_gpus(
    *, gpu_ids: list[int], actor, during: tuple[datetime, datetime] | None = None
) -> dict:
    """After GPUs leave service (for good, or `during` a maintenance window): move each open
    booking's remaining time on them to another free GPU of its model; tell the team when none
    is free. Returns what moved and what could not."""
    now = timezone.now()
    report: dict[str, list[dict]] = {"moved": [], "unresolved": []}
    lost: dict[int, tuple[Reservation, list[str], str]] = {}
    affected = selectors.open_reservations_on_gpus(gpu_ids=gpu_ids, now=now)
    if during is not None:
        affected = affected.filter(overlap_q(*during))
    for holding in affected.select_related("gpu__node").order_by("start", "id"):
        reservation = holding.reservation
        why = why_gpu_left(holding.gpu, maintenance=during is not None)
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
            lost.setdefault(reservation.pk, (reservation, [], why))[1].append(str(holding.gpu))
            ReservationGpu.objects.filter(pk=holding.pk).update(
                stranded=True, changed_at=now, change_reason=why
            )
            continue
        replacement = availability.pick_gpus(free, 1, same_node=False)[0]
        with transaction.atomic():
            if holding.start < window_start:
                ReservationGpu.objects.filter(pk=holding.pk).update(end=window_start)
            else:
                ReservationGpu.objects.filter(pk=holding.pk).update(active=False)
            ReservationGpu.objects.create(
                reservation=reservation,
                gpu_id=replacement.id,
                start=window_start,
                end=holding.end,
                moved_from_id=holding.gpu_id,
                changed_at=now,
                change_reason=why,
                over_quota=holding.over_quota,
            )
        entry["moved_to"] = f"{replacement.node}/gpu{replacement.index}"
        entry["reason"] = why
        report["moved"].append(entry)
        audit_record(
            actor=actor,
            action="reservation.relocate",
            target=reservation,
            before={"gpu": entry["gpu"]},
            after={"gpu": entry["moved_to"]},
            reason=f"GPU taken out of service: {why}",
        )
    _notify_moved(report["moved"])
    for reservation, gpus, why in lost.values():
        _notify_stranded(reservation, gpus, why, now=now, left=gpu_ids)
    return report


def why_gpu_left(gpu: Gpu, *, maintenance: bool = False) -> str:
    """Why a GPU left service, in the words a booking's page and mail use."""
    node = gpu.node
    if maintenance:
        return f"node {node.hostname} has a maintenance window"
    if node.power_state == PowerState.RESUME_FAILED:
        return f"node {node.hostname} did not power back on"
    if node.status in (NodeStatus.DRAINED, NodeStatus.RETIRED):
        return f"node {node.hostname} was {node.get_status_display().lower()}"
    if gpu.status in (GpuStatus.DRAINED, GpuStatus.RETIRED):
        return f"{gpu} was {gpu.get_status_display().lower()}"
    return f"{gpu} left service"


def _notify_stranded(
    reservation: Reservation, gpus: list[str], why: str, *, now, left: list[int]
) -> None:
    """Tell the booking's team which of its GPUs left service with nowhere to go, and what the
    booking still has: the rest of its GPUs, or none."""
    still_held = (
        bookings_holding(now)
        .filter(reservation=reservation, stranded=False)
        .exclude(gpu_id__in=left)
        .values("gpu_id")
        .distinct()
        .count()
    )
    lost = format_count(len(gpus), "GPU")
    if still_held:
        rest = f"The booking keeps its other {format_count(still_held, 'GPU')}."
    else:
        rest = (
            "The booking has no GPU left in service: cancel it and book another time, or keep "
            "it in case the GPUs return to service before it starts."
        )
    notify_team(
        reservation,
        f"GPU reservation #{reservation.pk} lost {lost}",
        # Written once per recipient zone, so the end is formatted then.
        lambda: (
            f"{', '.join(gpus)} left service because {why}, and no other "
            f"{reservation.gpu_model.name} GPU is free until {format_when(reservation.end)}. "
            f"{rest}\nThe booking's page shows which GPUs are affected.\n"
        ),
    )


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
            partial(_moved_body, reservation, entries, lines),
        )


def _moved_body(reservation: Reservation, entries: list[dict], lines: str) -> str:
    reasons = sorted({entry["reason"] for entry in entries if entry.get("reason")})
    because = f" because {' and '.join(reasons)}" if reasons else ""
    return (
        f"{format_count(len(entries), 'GPU')} of your booking #{reservation.pk} "
        f"({reservation.gpu_model.name}, {format_when(reservation.start)} - "
        f"{format_when(reservation.end)}) left service{because}, so the booking now uses "
        f"other GPUs of the same model:\n{lines}"
        "Point your jobs at the new node; the booking's times are unchanged.\n"
    )
