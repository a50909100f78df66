from django.db import models


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
    FOCUS = "focus", "FinOps FOCUS 1.2 (CSV)"


BUDGET_THRESHOLDS = (50, 80, 100)
PLATFORM_COST_CENTER = "platform"
