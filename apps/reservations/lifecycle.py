"""Bookings by the clock (beat, every minute): start them, finish them, remind before the end."""

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from apps.reservations.choices import OPEN_STATUSES, ReservationStatus
from apps.reservations.models import Reservation
from apps.reservations.policy import BookingPolicy
from apps.teams.services import mail_in_their_zones
from portal.formatting import format_when

logger = logging.getLogger(__name__)


def reservation_lifecycle_tick(*, now: datetime | None = None) -> dict[str, int]:
    """Advance bookings by the clock: start, finish, remind. Safe to run twice or in parallel."""
    now = now or timezone.now()
    policy = BookingPolicy.from_settings()
    with transaction.atomic():
        completed = Reservation.objects.filter(status__in=OPEN_STATUSES, end__lte=now).update(
            status=ReservationStatus.COMPLETED
        )
        activated = Reservation.objects.filter(
            status=ReservationStatus.SCHEDULED, start__lte=now, end__gt=now
        ).update(status=ReservationStatus.ACTIVE)
    reminded = 0
    due = Reservation.objects.filter(
        status=ReservationStatus.ACTIVE,
        reminder_sent_at__isnull=True,
        end__lte=now + policy.reminder_before,
        end__gt=now,
    ).values_list("pk", flat=True)
    for pk in due:
        with transaction.atomic():
            reservation = (
                Reservation.objects.select_for_update(skip_locked=True)
                .select_related("created_by", "team", "gpu_model")
                .filter(pk=pk, reminder_sent_at__isnull=True)
                .first()
            )
            if reservation is None:
                continue
            reservation.reminder_sent_at = now
            reservation.save(update_fields=["reminder_sent_at"])
            minutes = int((reservation.end - now).total_seconds() // 60)
            mail_in_their_zones(
                users=[reservation.created_by],
                subject=f"GPU reservation #{reservation.pk} ends in {minutes} minutes",
                body=lambda reservation=reservation: (
                    f"{reservation} ends at {format_when(reservation.end)}. "
                    "Extend it in the portal if you need more time and its GPUs are free.\n"
                ),
            )
            reminded += 1
    return {"activated": activated, "completed": completed, "reminded": reminded}
