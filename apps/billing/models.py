from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q

from apps.billing.choices import ChargeSource, Enforcement, PeriodStatus, RecoveryMethod
from apps.teams.models import Team, managed_units

MONEY = {"max_digits": 14, "decimal_places": 2}
# Ledger cost keeps full precision; only exported lines are rounded to cents (see exports.py).
PRECISE_MONEY = {"max_digits": 24, "decimal_places": 10}


class RateCard(models.Model):
    """Price of one GPU-hour of a model over [effective_from, effective_to)."""

    gpu_model = models.ForeignKey(
        "fleet.GpuModel",
        verbose_name="GPU model",
        on_delete=models.PROTECT,
        related_name="rates",
    )
    price_per_gpu_hour = models.DecimalField(
        "price per GPU-hour",
        max_digits=12,
        decimal_places=4,
        validators=[MinValueValidator(Decimal(0))],
    )
    currency = models.CharField(max_length=3, default="USD")
    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True, help_text="Empty: open-ended.")
    over_quota_multiplier = models.DecimalField(
        max_digits=6,
        decimal_places=3,
        default=Decimal("1.000"),
        validators=[MinValueValidator(Decimal(0))],
        help_text="Applied to GPU time above the team's guarantee.",
    )
    energy_price_per_kwh = models.DecimalField(
        "energy price per kWh",
        max_digits=10,
        decimal_places=5,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0))],
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["gpu_model__name", "effective_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(effective_to__isnull=True) | Q(effective_to__gt=F("effective_from")),
                name="ratecard_to_after_from",
                violation_error_message="effective_to must be after effective_from.",
            ),
            models.CheckConstraint(
                condition=Q(price_per_gpu_hour__gte=0)
                & Q(over_quota_multiplier__gte=0)
                & (Q(energy_price_per_kwh__isnull=True) | Q(energy_price_per_kwh__gte=0)),
                name="ratecard_prices_not_negative",
                violation_error_message="Prices cannot be negative.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_model} {self.price_per_gpu_hour} {self.currency}/GPU-h"


class BillingPeriod(models.Model):
    """A calendar month (UTC). Closed periods and their ledger entries never change."""

    month = models.DateField(unique=True, help_text="First day of the month.")
    status = models.CharField(max_length=8, choices=PeriodStatus.choices, default=PeriodStatus.OPEN)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    metered_until = models.DateTimeField(
        null=True, blank=True, help_text="Metering has charged everything before this instant."
    )

    class Meta:
        ordering = ["-month"]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m}"

    @property
    def is_closed(self) -> bool:
        return self.status == PeriodStatus.CLOSED


class LedgerEntry(models.Model):
    """One charge: a source's use of one GPU over one slice (a UTC hour, cut where the rate
    changes), a correction of one, or an adjustment. Append-only; (source, GPU, slice,
    revision) is unique, so re-metering an interval inserts nothing twice."""

    id = models.BigAutoField(primary_key=True)
    period = models.ForeignKey(BillingPeriod, on_delete=models.PROTECT, related_name="entries")
    team = models.ForeignKey(
        "teams.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    source = models.CharField(max_length=16, choices=ChargeSource.choices)
    source_id = models.BigIntegerField(help_text="Reservation, job or adjustment id; 0 otherwise.")
    gpu = models.ForeignKey(
        "fleet.Gpu", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    gpu_model = models.ForeignKey(
        "fleet.GpuModel",
        verbose_name="GPU model",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    slice_start = models.DateTimeField()
    slice_end = models.DateTimeField()
    gpu_seconds = models.PositiveIntegerField(default=0)
    # Negative only in a correction that lowers an earlier figure.
    busy_seconds = models.IntegerField(default=0)
    energy_kwh = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal(0))
    rate_card = models.ForeignKey(
        RateCard, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    unit_price = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal(0))
    over_quota = models.BooleanField(default=False)
    gpu_cost = models.DecimalField(**PRECISE_MONEY, default=Decimal(0))
    energy_cost = models.DecimalField(**PRECISE_MONEY, default=Decimal(0))
    idle_cost = models.DecimalField(
        **PRECISE_MONEY,
        default=Decimal(0),
        help_text="The part of gpu_cost a booking held idle (reservations only).",
    )
    cost = models.DecimalField(**PRECISE_MONEY, help_text="gpu_cost + energy_cost.")
    revision = models.PositiveSmallIntegerField(
        default=0,
        help_text=(
            "0: the charge of the slice. 1, 2, ...: corrections appended when telemetry of the "
            "slice arrived or changed after it was charged (busy seconds, energy and their cost)."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slice_start", "id"]
        verbose_name_plural = "ledger entries"
        constraints = [
            models.UniqueConstraint(
                # slice_start first: metering asks "is anything charged in this window yet?"
                fields=["slice_start", "gpu", "source", "source_id", "revision"],
                name="ledger_unique_source_gpu_slice_revision",
            ),
            models.CheckConstraint(
                condition=Q(slice_end__gte=F("slice_start")),
                name="ledger_slice_ordered",
            ),
        ]
        indexes = [
            models.Index(fields=["period", "team", "slice_start"], name="ledger_period_team_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.source} #{self.source_id} {self.slice_start:%Y-%m-%d %H:%M} {self.cost}"


class Adjustment(models.Model):
    """A correction booked in an open period; it may point at the entry or period it corrects."""

    period = models.ForeignKey(BillingPeriod, on_delete=models.PROTECT, related_name="adjustments")
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="+")
    amount = models.DecimalField(**MONEY, help_text="Negative for a credit.")
    reason = models.TextField()
    corrects_entry = models.ForeignKey(
        LedgerEntry, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    corrects_period = models.ForeignKey(
        BillingPeriod, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.team} {self.amount} ({self.period})"


class BudgetQuerySet(models.QuerySet):
    def for_user(self, user) -> "BudgetQuerySet":
        """Budgets the user may see: all for finance and platform admins; else those of the
        teams they see (their own and every team below a unit they administer) and of the units
        they administer and every unit below."""
        if not user.is_authenticated or not user.is_active:
            return self.none()
        if user.sees_all_teams:
            return self
        return self.filter(
            Q(team__in=Team.objects.for_user(user)) | Q(unit_id__in=managed_units(user))
        )


class Budget(models.Model):
    """A month's budget of one team, or of one organisation unit (covering the spend of every
    team below it); exactly one of the two is set."""

    team = models.ForeignKey(
        "teams.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="budgets"
    )
    unit = models.ForeignKey(
        "teams.OrgUnit", null=True, blank=True, on_delete=models.CASCADE, related_name="budgets"
    )
    period = models.ForeignKey(BillingPeriod, on_delete=models.PROTECT, related_name="budgets")
    amount = models.DecimalField(**MONEY, validators=[MinValueValidator(Decimal(0))])
    enforcement = models.CharField(
        max_length=8, choices=Enforcement.choices, default=Enforcement.ALERT
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = BudgetQuerySet.as_manager()

    class Meta:
        ordering = ["-period__month", "unit__slug", "team__slug"]
        constraints = [
            models.UniqueConstraint(fields=["team", "period"], name="budget_unique_team_period"),
            models.UniqueConstraint(fields=["unit", "period"], name="budget_unique_unit_period"),
            models.CheckConstraint(
                condition=Q(team__isnull=False, unit__isnull=True)
                | Q(team__isnull=True, unit__isnull=False),
                name="budget_team_or_unit",
                violation_error_message="A budget belongs to either a team or a unit.",
            ),
            models.CheckConstraint(
                condition=Q(amount__gte=0),
                name="budget_amount_not_negative",
                violation_error_message="A budget cannot be negative.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.owner} {self.period}: {self.amount}"

    @property
    def owner(self):
        """The team or the unit the budget belongs to."""
        return self.team if self.team_id else self.unit


class BudgetAlert(models.Model):
    """A threshold (50/80/100 %) a budget crossed, or (kind `forecast`) the day the forecast
    says the team's spend passes 100 % of it; each sent once."""

    class Kind(models.TextChoices):
        THRESHOLD = "threshold", "Threshold crossed"
        FORECAST = "forecast", "Forecast to exceed"

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.THRESHOLD)
    threshold = models.PositiveSmallIntegerField()
    spent = models.DecimalField(**MONEY)
    exceeds_on = models.DateField(
        null=True, blank=True, help_text="Forecast alerts: the day the budget would be passed."
    )
    message = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "kind", "threshold"], name="budgetalert_unique_kind"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget} reached {self.threshold} %"


class CostRecoveryPolicy(models.Model):
    """How a month's platform cost is recovered from the teams (see `recovery.py`); set by
    finance, audited, final once the month is closed."""

    period = models.OneToOneField(
        BillingPeriod, on_delete=models.PROTECT, related_name="recovery_policy"
    )
    method = models.CharField(
        max_length=10, choices=RecoveryMethod.choices, default=RecoveryMethod.KEEP
    )
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.period}: {self.get_method_display()}"


class RemeterRange(models.Model):
    """Hours whose telemetry was rolled up again after they may have been charged (samples that
    arrived late). The next hourly metering run corrects these hours, and only these, then
    forgets the note."""

    start = models.DateTimeField()
    end = models.DateTimeField()
    noted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["start"]
        constraints = [
            models.CheckConstraint(
                condition=Q(end__gt=F("start")),
                name="remeterrange_end_after_start",
                violation_error_message="A range to re-meter must end after it starts.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M} - {self.end:%Y-%m-%d %H:%M}"
