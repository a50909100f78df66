from django.db import models


class BillingMode(models.TextChoices):
    """settings.BILLING_MODE: charge money, or show GPU-hours only."""

    CHARGEBACK = "chargeback", "Chargeback (costs in money)"
    SHOWBACK = "showback", "Showback (GPU-hours only)"


def is_showback() -> bool:
    from django.conf import settings

    return settings.BILLING_MODE == BillingMode.SHOWBACK


class PeriodStatus(models.TextChoices):
    OPEN = "open", "Open"
    CLOSED = "closed", "Closed"


class ChargeSource(models.TextChoices):
    """What a ledger entry charges for."""

    RESERVATION = "reservation", "Reservation"
    JOB = "job", "Job outside a reservation"
    UNALLOCATED = "unallocated", "Unallocated capacity (platform)"
    ADJUSTMENT = "adjustment", "Adjustment"


class Enforcement(models.TextChoices):
    ALERT = "alert", "Alert only"
    BLOCK = "block", "Block bookings over budget"


class ExportFormat(models.TextChoices):
    CSV = "csv", "CSV"
    JSON = "json", "JSON"
    XLSX = "xlsx", "Excel (XLSX)"
    FOCUS = "focus", "FinOps FOCUS 1.3 or 1.2 (CSV)"


BUDGET_THRESHOLDS = (50, 80, 100)
PLATFORM_COST_CENTER = "platform"


class RecoveryMethod(models.TextChoices):
    """How a month's platform cost (unallocated capacity and the platform's own charges) is
    recovered from the teams."""

    KEEP = "keep", "Keep on platform (showback of idle capacity)"
    USAGE = "usage", "Share by usage (GPU-hours charged to each team)"
    GUARANTEE = "guarantee", "Share by guarantees (guaranteed GPUs of each team)"
    EVEN = "even", "Share evenly between active teams"
