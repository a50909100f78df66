"""Billing periods (months): closing one, booking adjustments in an open one, and how its
platform cost is recovered. A closed month never changes."""

from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.billing.choices import ChargeSource, PeriodStatus, RecoveryMethod
from apps.billing.models import Adjustment, BillingPeriod, CostRecoveryPolicy, LedgerEntry
from apps.billing.periods import month_bounds, month_start
from apps.billing.selectors import team_total_all
from apps.billing.services.access import require_billing_admin
from portal.exceptions import ConflictError
from portal.formatting import format_when

CENT = Decimal("0.01")


def period_get_or_create(month) -> BillingPeriod:
    """The billing period of `month` (its first day), opened if it has none yet."""
    period, _ = BillingPeriod.objects.get_or_create(month=month)
    return period


def require_open(period: BillingPeriod, verb: str) -> None:
    """Refuse (409) a change to a closed month, naming what was tried (`verb`)."""
    if period.is_closed:
        raise ConflictError(
            f"Billing period {period} is closed; {verb} is not possible. "
            "Book a correction as an adjustment in an open period.",
            code="period_closed",
        )


@transaction.atomic
def period_close(*, actor, period: BillingPeriod, now: datetime | None = None) -> BillingPeriod:
    """Close a finished month after charging its last hours. From then on its ledger entries,
    adjustments and budgets never change (PostgreSQL also enforces it with triggers). Audited."""
    from apps.billing.metering import meter_interval

    require_billing_admin(actor)
    now = now or timezone.now()
    period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
    require_open(period, "closing it again")
    start, end = month_bounds(period.month)
    if now < end:
        raise ConflictError(
            f"{period} is not over yet; it can be closed from {format_when(end)}.",
            code="period_not_over",
        )
    meter_interval(start=start, end=end, now=now)
    period.refresh_from_db()
    period.status, period.closed_at, period.closed_by = PeriodStatus.CLOSED, now, actor
    period.save(update_fields=["status", "closed_at", "closed_by"])
    audit_record(
        actor=actor,
        action="billing_period.close",
        target=period,
        before={"status": PeriodStatus.OPEN},
        after={"status": PeriodStatus.CLOSED, "total": str(team_total_all(period))},
    )
    return period


@transaction.atomic
def adjustment_create(
    *,
    actor,
    team,
    amount: Decimal,
    reason: str,
    period: BillingPeriod | None = None,
    corrects_entry: LedgerEntry | None = None,
    corrects_period: BillingPeriod | None = None,
    now: datetime | None = None,
) -> Adjustment:
    """Book a correction (negative: a credit) for a team in an open period (default: the
    current month). It appears in the ledger and every export as its own line. Audited."""
    require_billing_admin(actor)
    now = now or timezone.now()
    if not reason.strip():
        raise ValidationError({"reason": "Say what the adjustment corrects."})
    amount = Decimal(amount)
    if amount == 0 or amount != amount.quantize(CENT):
        raise ValidationError({"amount": "Give a non-zero amount in whole cents."})
    period = period or period_get_or_create(month_start(now))
    period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
    require_open(period, "booking an adjustment in it")
    if corrects_period is not None and corrects_period.month > period.month:
        raise ValidationError(
            {
                "corrects_period": (
                    f"An adjustment booked in {period} corrects {period} or an earlier month, "
                    f"not {corrects_period}."
                )
            }
        )
    if corrects_entry is not None and corrects_entry.team_id not in (None, team.pk):
        raise ValidationError({"corrects_entry": "That entry belongs to another team."})
    adjustment = Adjustment.objects.create(
        period=period,
        team=team,
        amount=amount,
        reason=reason.strip(),
        corrects_entry=corrects_entry,
        corrects_period=corrects_period or (corrects_entry.period if corrects_entry else None),
        created_by=actor,
    )
    start, _ = month_bounds(period.month)
    moment = max(min(now, month_bounds(period.month)[1] - timedelta(seconds=1)), start)
    LedgerEntry.objects.create(
        period=period,
        team=team,
        source=ChargeSource.ADJUSTMENT,
        source_id=adjustment.pk,
        slice_start=moment,
        slice_end=moment,
        cost=amount,
        gpu_cost=amount,
    )
    audit_record(
        actor=actor,
        action="adjustment.create",
        target=adjustment,
        after={
            "team": team.slug,
            "amount": str(amount),
            "period": str(period),
            "corrects_period": str(adjustment.corrects_period or ""),
            "reason": reason,
        },
    )
    return adjustment


@transaction.atomic
def cost_recovery_set(*, actor, period: BillingPeriod, method: str) -> CostRecoveryPolicy:
    """Choose how the month's platform cost is recovered from the teams (`recovery.py`): kept
    on the platform, or shared by usage, guarantees or evenly. Finance and platform admins;
    a closed month's policy is final (409). Audited."""
    require_billing_admin(actor)
    if method not in RecoveryMethod.values:
        raise ValidationError({"method": f"Choose one of {', '.join(RecoveryMethod.values)}."})
    period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
    require_open(period, "changing how its platform cost is recovered")
    policy = CostRecoveryPolicy.objects.select_for_update().filter(period=period).first()
    before = {"method": policy.method} if policy else {"method": RecoveryMethod.KEEP}
    if policy is None:
        policy = CostRecoveryPolicy(period=period)
    policy.method, policy.set_by = method, actor
    policy.save()
    audit_record(
        actor=actor,
        action="cost_recovery.change",
        target=policy,
        before=before,
        after={"method": method, "period": str(period)},
    )
    return policy
