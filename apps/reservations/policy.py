"""Booking policy knobs (from settings) and the budget check billing answers."""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings

from portal import queries


@dataclass(frozen=True)
class BookingPolicy:
    slot: timedelta
    max_duration: timedelta
    max_advance: timedelta
    max_gpus: int
    reminder_before: timedelta

    @classmethod
    def from_settings(cls) -> "BookingPolicy":
        return cls(
            slot=timedelta(minutes=settings.RESERVATION_SLOT_MINUTES),
            max_duration=timedelta(hours=settings.RESERVATION_MAX_DURATION_HOURS),
            max_advance=timedelta(days=settings.RESERVATION_MAX_ADVANCE_DAYS),
            max_gpus=settings.RESERVATION_MAX_GPUS,
            reminder_before=timedelta(minutes=settings.RESERVATION_REMINDER_MINUTES),
        )


def budget_check(**booking) -> None:
    """Raises PolicyRefusal when an answerer of the `reservations.budget_check` query (billing)
    refuses the booking; allows it when nothing answers."""
    queries.ask("reservations.budget_check", **booking)
