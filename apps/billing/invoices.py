"""Invoice ids: one per team (sub-account) and month. A closed month's id is final; an open
month's carries a DRAFT prefix, so a file exported before the close can never be mistaken for
the invoice."""

from apps.billing.models import BillingPeriod

DRAFT_PREFIX = "DRAFT-"


def invoice_id(period: BillingPeriod, sub_account: str) -> str:
    """`GPU-2026-11-vision` for a closed month, `DRAFT-GPU-2026-11-vision` for an open one."""
    number = f"GPU-{period.month:%Y-%m}-{sub_account}"
    return number if period.is_closed else DRAFT_PREFIX + number
