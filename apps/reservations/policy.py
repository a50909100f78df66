"""Booking policy knobs (from settings) and the budget hook billing will fill in."""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils.module_loading import import_string


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


def allow_any_budget(*, team, gpu_model, count, start, end, over_quota_gpus=0) -> None:
    """Default budget check: allows everything. Billing replaces it through
    RESERVATION_BUDGET_CHECK with one that raises PolicyRefusal(code="budget_exhausted")."""
    return None


def budget_check(**booking) -> None:
    import_string(settings.RESERVATION_BUDGET_CHECK)(**booking)
