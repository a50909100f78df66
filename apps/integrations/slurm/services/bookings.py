"""Portal bookings mirrored as Slurm reservations."""

from datetime import datetime

from django.conf import settings
from django.utils import timezone

from apps.integrations.slurm.client import (
    SlurmError,
)
from apps.integrations.slurm.models import SlurmReservation
from apps.integrations.slurm.services.common import _refused, client, reservation_name
from apps.reservations.choices import OPEN_STATUSES as RESERVATION_OPEN_STATUSES
from apps.reservations.models import Reservation


def _booking_nodes(reservation: Reservation) -> list[str]:
    return sorted(
        set(reservation.holdings.filter(active=True).values_list("gpu__node__hostname", flat=True))
    )


def on_reservation_created(*, reservation: Reservation, **_) -> SlurmReservation:
    """Hook `reservation.created`: an advance reservation on the booking's nodes for the team's
    account. Slurm 22.05 reserves whole nodes (it cannot reserve GPUs by count), so a second
    team's booking on a node already reserved in Slurm is refused and rolled back."""
    name = reservation_name(reservation)
    nodes = _booking_nodes(reservation)
    now = timezone.now()
    try:
        client().reservation_create(
            name=name,
            start=None if reservation.start <= now else reservation.start,
            end=reservation.end,
            nodes=nodes,
            accounts=[reservation.team.slug],
        )
    except SlurmError as error:
        raise _refused("the booking", error) from error
    return SlurmReservation.objects.create(
        reservation=reservation, name=name, nodes=",".join(nodes), end=reservation.end
    )


def on_reservation_extended(*, reservation: Reservation, **_) -> None:
    """Hook `reservation.extended`: move the Slurm reservation's end (refusal rolls back)."""
    mirrored = SlurmReservation.objects.filter(
        reservation=reservation, deleted_at__isnull=True
    ).first()
    if mirrored is None:
        return
    try:
        client().reservation_update(name=mirrored.name, end=reservation.end)
    except SlurmError as error:
        raise _refused("to extend the booking", error) from error
    mirrored.end = reservation.end
    mirrored.save(update_fields=["end"])


def on_reservation_ended(*, reservation: Reservation, **_) -> None:
    """Hook `reservation.ended` (cancelled or released idle): delete the Slurm reservation."""
    mirrored = SlurmReservation.objects.filter(
        reservation=reservation, deleted_at__isnull=True
    ).first()
    if mirrored is None:
        return
    try:
        client().reservation_delete(mirrored.name)
    except SlurmError as error:
        raise _refused("to remove the booking's reservation", error) from error
    mirrored.deleted_at = timezone.now()
    mirrored.save(update_fields=["deleted_at"])


def reservations_reconcile(*, now: datetime | None = None) -> dict[str, list[str]]:
    """Delete Slurm reservations of ours (name prefix) whose booking is over, cancelled or
    was never committed; mark those Slurm already dropped as deleted."""
    now = now or timezone.now()
    prefix = settings.SLURM_RESERVATION_PREFIX
    in_slurm = {n for n in client().reservations() if n.startswith(prefix)}
    live = set(
        SlurmReservation.objects.filter(
            deleted_at__isnull=True,
            reservation__status__in=RESERVATION_OPEN_STATUSES,
            reservation__end__gt=now,
        ).values_list("name", flat=True)
    )
    removed = sorted(in_slurm - live)
    for name in removed:
        client().reservation_delete(name)
    SlurmReservation.objects.filter(deleted_at__isnull=True).exclude(
        name__in=in_slurm - set(removed)
    ).update(deleted_at=now)
    return {"removed": removed}
