"""Billing rules: rate cards, periods, adjustments, budgets and the booking budget check.

One module per operation; callers import from here (`from apps.billing import services`).
Metering lives in `metering.py`, exports in `exports.py`; both are services too.
"""

from apps.billing.services.access import is_billing_admin, require_billing_admin
from apps.billing.services.budgets import (
    BUDGET_MONTHS_AHEAD,
    budget_alerts_check,
    budget_alerts_check_all,
    budget_set,
    check_booking_budget,
)
from apps.billing.services.periods import (
    CENT,
    adjustment_create,
    cost_recovery_set,
    period_close,
    period_get_or_create,
)
from apps.billing.services.rates import RATE_FIELDS, rate_card_create, rate_card_update

__all__ = [
    "BUDGET_MONTHS_AHEAD",
    "CENT",
    "RATE_FIELDS",
    "adjustment_create",
    "budget_alerts_check",
    "budget_alerts_check_all",
    "budget_set",
    "check_booking_budget",
    "cost_recovery_set",
    "is_billing_admin",
    "period_close",
    "period_get_or_create",
    "rate_card_create",
    "rate_card_update",
    "require_billing_admin",
]
