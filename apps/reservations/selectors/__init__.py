"""Reads for reservations: what is free, what a team holds, what a user may see.

One module per kind of read: `free` (schedulable GPUs, busy intervals, bookable slots, free
capacity), `quota` (what a team holds and may still book), `bookings` (lists, the bookings on
GPUs, what became of a booking's GPUs). Who holds a GPU when is `apps.reservations.holdings`.
"""

from apps.reservations.selectors.bookings import (
    HoldingChange,
    booking_references,
    holding_changes,
    open_reservations_on_gpus,
    reservation_list,
    with_figures,
)
from apps.reservations.selectors.free import (
    BookableSlot,
    EpochSeconds,
    availability_search,
    busy_intervals,
    free_capacity,
    powered_down_busy,
    schedulable_gpus,
    slots_from_now,
)
from apps.reservations.selectors.quota import (
    quota_usage,
    quota_verdict,
    team_bookings_statement,
    team_holdings,
    team_quota_blocked,
    team_quota_models,
    teams_holdings,
)

__all__ = [
    "BookableSlot",
    "EpochSeconds",
    "HoldingChange",
    "availability_search",
    "booking_references",
    "busy_intervals",
    "free_capacity",
    "holding_changes",
    "open_reservations_on_gpus",
    "powered_down_busy",
    "quota_usage",
    "quota_verdict",
    "reservation_list",
    "schedulable_gpus",
    "slots_from_now",
    "team_bookings_statement",
    "team_holdings",
    "team_quota_blocked",
    "team_quota_models",
    "teams_holdings",
    "with_figures",
]
