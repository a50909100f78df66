"""Billing rules: rate cards, periods, adjustments, budgets and the booking budget check.

Metering lives in `metering.py`, exports in `exports.py`; both are services too.
"""

from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from apps.audit.services import audit_record
from apps.billing.choices import (
    BUDGET_THRESHOLDS,
    ChargeSource,
    Enforcement,
    PeriodStatus,
    RecoveryMethod,
    is_showback,
)
from apps.billing.models import (
    Adjustment,
    BillingPeriod,
    Budget,
    BudgetAlert,
    CostRecoveryPolicy,
    LedgerEntry,
    RateCard,
)
from apps.billing.periods import add_months, month_bounds, month_start, next_month
from apps.billing.pricing import price_holding
from apps.billing.selectors import (
    booked_cost,
    budget_for,
    period_for_month,
    team_spend,
    team_total_all,
)
from apps.outbox.services import outbox_send_mail
from apps.teams.choices import TeamRole
from apps.teams.models import Membership
from apps.teams.permissions import is_finance, is_platform_admin
from portal.exceptions import ConflictError, PolicyRefusal
from portal.formatting import format_money, format_when

CENT = Decimal("0.01")
# Budgets can be planned this many months past the current one (bookings reach into them).
BUDGET_MONTHS_AHEAD = 12
RATE_FIELDS = (
    "price_per_gpu_hour",
    "currency",
    "effective_from",
    "effective_to",
    "over_quota_multiplier",
    "energy_price_per_kwh",
)


def is_billing_admin(user) -> bool:
    """Finance users and platform admins manage prices, periods, budgets and adjustments, and
    see every team's charges."""
    return is_finance(user) or is_platform_admin(user)


def require_billing_admin(user) -> None:
    if not is_billing_admin(user):
        raise PolicyRefusal("Only finance users and platform admins may do this.")


def _rate_snapshot(card: RateCard) -> dict:
    values = {f: getattr(card, f) for f in RATE_FIELDS}
    return {"gpu_model": card.gpu_model.name} | {
        name: None if value is None else str(value) for name, value in values.items()
    }


def _metered_horizon(gpu_model) -> datetime | None:
    """The end of the latest slice already charged for the model: prices before it are final."""
    return LedgerEntry.objects.filter(gpu_model=gpu_model).aggregate(end=Max("slice_end"))["end"]


def _check_rate_card(card: RateCard, *, previous: RateCard | None = None) -> None:
    card.full_clean()
    overlapping = RateCard.objects.filter(gpu_model=card.gpu_model).exclude(pk=card.pk)
    overlapping = overlapping.filter(
        Q(effective_to__isnull=True) | Q(effective_to__gt=card.effective_from)
    )
    if card.effective_to is not None:
        overlapping = overlapping.filter(effective_from__lt=card.effective_to)
    clash = overlapping.first()
    if clash:
        until = f"{format_when(clash.effective_to)}" if clash.effective_to else "open-ended"
        raise ValidationError(
            {
                "effective_from": (
                    f"Overlaps the {card.gpu_model} rate card in force from "
                    f"{format_when(clash.effective_from)} ({until}); end that one first."
                )
            }
        )
    horizon = _metered_horizon(card.gpu_model)
    changed_from = _changed_from(previous, card)
    if horizon is not None and changed_from is not None and changed_from < horizon:
        raise ValidationError(
            {
                "effective_from": (
                    f"Usage up to {format_when(horizon)} is already charged at the price "
                    "then in force; a change may only take effect after that."
                )
            }
        )


def _changed_from(previous: RateCard | None, card: RateCard) -> datetime | None:
    """The first instant whose price the edit changes (None: nothing changes)."""
    if previous is None:
        return card.effective_from
    if _price_terms(previous) != _price_terms(card):
        return min(previous.effective_from, card.effective_from)
    moments = []
    if previous.effective_from != card.effective_from:
        moments.append(min(previous.effective_from, card.effective_from))
    if previous.effective_to != card.effective_to:
        ends = [e for e in (previous.effective_to, card.effective_to) if e is not None]
        moments.append(min(ends))
    return min(moments) if moments else None


def _price_terms(card: RateCard) -> tuple:
    return (
        card.price_per_gpu_hour,
        card.currency,
        card.over_quota_multiplier,
        card.energy_price_per_kwh,
    )


@transaction.atomic
def rate_card_create(*, actor, gpu_model, **fields) -> RateCard:
    """Add a price for a GPU model from `effective_from`. Refuses overlaps with the model's other
    cards and any start before time already charged. Audited."""
    require_billing_admin(actor)
    _serialize_rate_changes()
    card = RateCard(gpu_model=gpu_model, **fields)
    card.currency = (card.currency or settings.BILLING_CURRENCY).upper()
    _check_rate_card(card)
    card.save()
    audit_record(actor=actor, action="rate_card.create", target=card, after=_rate_snapshot(card))
    return card


@transaction.atomic
def rate_card_update(*, actor, card: RateCard, **fields) -> RateCard:
    """Change a rate card (e.g. end it so a new price can start). Time already charged keeps its
    price: the change must take effect after the metered horizon. Audited."""
    require_billing_admin(actor)
    _serialize_rate_changes()
    card = RateCard.objects.select_for_update().select_related("gpu_model").get(pk=card.pk)
    before = _rate_snapshot(card)
    previous = RateCard(**{f: getattr(card, f) for f in RATE_FIELDS}, gpu_model=card.gpu_model)
    for name, value in fields.items():
        setattr(card, name, value)
    card.currency = card.currency.upper()
    _check_rate_card(card, previous=previous)
    card.save()
    audit_record(
        actor=actor,
        action="rate_card.change",
        target=card,
        before=before,
        after=_rate_snapshot(card),
    )
    return card


def _serialize_rate_changes() -> None:
    """Two racing edits must not both pass the overlap check (SQLite has no exclusion
    constraint; PostgreSQL has one, this just gives a clean error instead of an IntegrityError)."""
    list(RateCard.objects.select_for_update().values_list("pk", flat=True))


def period_get_or_create(month) -> BillingPeriod:
    period, _ = BillingPeriod.objects.get_or_create(month=month)
    return period


def _require_open(period: BillingPeriod, verb: str) -> None:
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
    _require_open(period, "closing it again")
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
    _require_open(period, "booking an adjustment in it")
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
def budget_set(
    *, actor, team, period: BillingPeriod, amount: Decimal, enforcement: str = Enforcement.ALERT
) -> Budget:
    """Set a team's budget for a month and whether it only alerts or also blocks bookings.
    Any open month up to BUDGET_MONTHS_AHEAD ahead; a closed month's budgets are final.
    Audited."""
    require_billing_admin(actor)
    period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
    _require_open(period, "changing its budgets")
    latest = add_months(month_start(timezone.now()), BUDGET_MONTHS_AHEAD)
    if period.month > latest:
        raise ValidationError(
            {
                "period": f"Budgets can be set up to {BUDGET_MONTHS_AHEAD} months ahead, "
                f"until {latest:%Y-%m}."
            }
        )
    amount = Decimal(amount)
    if amount < 0:
        raise ValidationError({"amount": "A budget cannot be negative."})
    if enforcement not in Enforcement.values:
        raise ValidationError({"enforcement": f"Choose one of {', '.join(Enforcement.values)}."})
    budget = Budget.objects.select_for_update().filter(team=team, period=period).first()
    before = {"amount": str(budget.amount), "enforcement": budget.enforcement} if budget else None
    if budget is None:
        budget = Budget(team=team, period=period)
    budget.amount, budget.enforcement = amount.quantize(CENT), enforcement
    budget.full_clean()
    budget.save()
    audit_record(
        actor=actor,
        action="budget.change" if before else "budget.create",
        target=budget,
        before=before,
        after={"amount": str(budget.amount), "enforcement": enforcement},
    )
    budget_alerts_check(budget=budget)
    return budget


def budget_alerts_check(*, budget: Budget, now: datetime | None = None) -> list[BudgetAlert]:
    """Record (once each) the 50/80/100 % thresholds the team's spend has crossed and email the
    team admins; and once, while the month is still running and the budget not yet passed, the
    day the forecast (`forecast.forecast`) says it will be ("at this rate nlp exceeds its budget
    on Dec 21"). The alerts also show in the portal and the API."""
    if budget.amount <= 0:
        return []
    spent = team_spend(team=budget.team, period=budget.period)
    crossed = [t for t in BUDGET_THRESHOLDS if spent * 100 >= budget.amount * t]
    known = set(
        budget.alerts.filter(kind=BudgetAlert.Kind.THRESHOLD).values_list("threshold", flat=True)
    )
    created = _forecast_alert(budget, spent, now=now or timezone.now())
    for threshold in crossed:
        if threshold in known:
            continue
        created.append(
            BudgetAlert.objects.create(
                budget=budget, threshold=threshold, spent=spent.quantize(CENT)
            )
        )
    thresholds = [a for a in created if a.kind == BudgetAlert.Kind.THRESHOLD]
    if thresholds:
        _email_budget_alert(budget, max(a.threshold for a in thresholds), spent)
    return created


def _forecast_alert(budget: Budget, spent: Decimal, *, now: datetime) -> list[BudgetAlert]:
    from apps.billing.forecast import forecast

    _, end = month_bounds(budget.period.month)
    if now >= end or spent >= budget.amount or budget.period.is_closed:
        return []
    if budget.alerts.filter(kind=BudgetAlert.Kind.FORECAST).exists():
        return []
    outlook = forecast(team=budget.team, period=budget.period, now=now)
    if outlook.exceeds_on is None:
        return []
    alert = BudgetAlert.objects.create(
        budget=budget,
        kind=BudgetAlert.Kind.FORECAST,
        threshold=100,
        spent=spent.quantize(CENT),
        exceeds_on=outlook.exceeds_on,
        message=outlook.message,
    )
    recipients = _team_admin_emails(budget)
    if recipients:
        outbox_send_mail(
            subject=f"[GPU portal] {outlook.message}",
            body=(
                f"{outlook.message}\n\nTeam {budget.team.name} has been charged "
                f"{outlook.spent} of its {budget.amount} budget for {budget.period}; "
                f"{outlook.booked} more is booked. At its run-rate of {outlook.run_rate} a day "
                f"(last {outlook.window_days} days; range {outlook.run_rate_low} to "
                f"{outlook.run_rate_high}) the month ends at about {outlook.projected} "
                f"({outlook.projected_low} to {outlook.projected_high})."
            ),
            recipients=recipients,
        )
    return [alert]


def _team_admin_emails(budget: Budget) -> list[str]:
    return sorted(
        set(
            Membership.objects.filter(team=budget.team, role=TeamRole.TEAM_ADMIN).values_list(
                "user__email", flat=True
            )
        )
        - {""}
    )


def budget_alerts_check_all(*, periods) -> int:
    count = 0
    for budget in Budget.objects.filter(period__in=periods).select_related("team", "period"):
        count += len(budget_alerts_check(budget=budget))
    return count


def _email_budget_alert(budget: Budget, threshold: int, spent: Decimal) -> None:
    recipients = _team_admin_emails(budget)
    if not recipients:
        return
    subject = (
        f"[GPU portal] {budget.team.slug} has used {threshold} % of its {budget.period} budget"
    )
    body = (
        f"Team {budget.team.name} has been charged {format_money(spent)} of its "
        f"{format_money(budget.amount)} budget for {budget.period} ({threshold} % threshold)."
    )
    outbox_send_mail(subject=subject, body=body, recipients=list(recipients))


@transaction.atomic
def cost_recovery_set(*, actor, period: BillingPeriod, method: str) -> CostRecoveryPolicy:
    """Choose how the month's platform cost is recovered from the teams (`recovery.py`): kept
    on the platform, or shared by usage, guarantees or evenly. Finance and platform admins;
    a closed month's policy is final (409). Audited."""
    require_billing_admin(actor)
    if method not in RecoveryMethod.values:
        raise ValidationError({"method": f"Choose one of {', '.join(RecoveryMethod.values)}."})
    period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
    _require_open(period, "changing how its platform cost is recovered")
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


def check_booking_budget(*, team, gpu_model, count, start, end, over_quota_gpus=0) -> None:
    """Answers the `reservations.budget_check` query (portal.queries): a team in `block` mode
    cannot book more than is left of its budget in any month the booking falls in; each
    month's part of the booking is weighed against that month's budget. The booking is priced
    as it will be charged (`pricing.price_holding`): `over_quota_gpus` of its GPUs at the
    over-quota multiplier, plus the energy estimate."""
    if is_showback():
        return
    now = timezone.now()
    month = month_start(start)
    while (bounds := month_bounds(month))[0] < end:
        part_start, part_end = max(start, bounds[0]), min(end, bounds[1])
        _check_month_budget(
            team=team, gpu_model=gpu_model, count=count, start=part_start, end=part_end,
            over_quota_gpus=over_quota_gpus, period=period_for_month(month), now=now,
        )  # fmt: skip
        month = next_month(month)


def _check_month_budget(
    *, team, gpu_model, count, start, end, over_quota_gpus, period, now
) -> None:
    budget = budget_for(team=team, period=period)
    if budget is None or budget.enforcement != Enforcement.BLOCK:
        return
    price = price_holding(
        gpu_model=gpu_model, count=count, start=start, end=end, over_quota_gpus=over_quota_gpus
    )
    cost = price.total
    spent = team_spend(team=team, period=period)
    booked = booked_cost(team=team, period=period, now=now)
    left = budget.amount - spent - booked
    # A free booking (no price yet) never spends anything, whatever the budget state.
    if cost > 0 and cost > left:
        available = max(left, Decimal(0)).quantize(CENT)
        raise PolicyRefusal(
            f"This booking would cost {format_money(cost)} in {period} but only "
            f"{format_money(available)} is left of {team.slug}'s {format_money(budget.amount)} "
            "budget for that month.",
            code="budget_exhausted",
            detail={
                "budget": str(budget.amount),
                "spent": str(spent.quantize(CENT)),
                "booked": str(booked.quantize(CENT)),
                "left": str(left.quantize(CENT)),
                "booking_cost": str(cost.quantize(CENT)),
                "list_cost": str(price.list_cost.quantize(CENT)),
                "over_quota_premium": str(price.over_quota_premium.quantize(CENT)),
                "energy_cost": str(price.energy_cost.quantize(CENT)),
                "period": str(period),
            },
        )
