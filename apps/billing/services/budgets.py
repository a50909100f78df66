"""Budgets: a team's budget for a month, its alerts (thresholds crossed, the forecast day it
will be passed), and the check that a booking fits a blocking budget."""

from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.billing.choices import BUDGET_THRESHOLDS, Enforcement, is_showback
from apps.billing.models import BillingPeriod, Budget, BudgetAlert
from apps.billing.periods import add_months, month_bounds, month_start, next_month
from apps.billing.pricing import price_holding
from apps.billing.selectors import (
    booked_cost,
    budget_spend,
    budget_team_ids,
    budgets_on_path,
    charged_by_team,
    nearest_first,
    period_for_month,
    teams_spend,
)
from apps.billing.services.access import require_billing_admin
from apps.billing.services.periods import CENT, require_open
from apps.outbox.services import outbox_send_mail
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, UnitMembership
from apps.teams.selectors import org_tree, unit_path_label
from portal.exceptions import PolicyRefusal
from portal.formatting import format_money

# Budgets can be planned this many months past the current one (bookings reach into them).
BUDGET_MONTHS_AHEAD = 12


@transaction.atomic
def budget_set(
    *,
    actor,
    period: BillingPeriod,
    amount: Decimal,
    enforcement: str = Enforcement.ALERT,
    team=None,
    unit=None,
) -> Budget:
    """Set a team's or a unit's budget for a month and whether it only alerts or also blocks
    bookings (a unit's covers the spend of every team below it, and blocks each of them).
    Any open month up to BUDGET_MONTHS_AHEAD ahead; a closed month's budgets are final.
    Audited."""
    require_billing_admin(actor)
    if (team is None) == (unit is None):
        raise ValidationError({"team": "Give either a team or a unit, not both or neither."})
    period = BillingPeriod.objects.select_for_update().get(pk=period.pk)
    require_open(period, "changing its budgets")
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
    owner = {"team": team} if team is not None else {"unit": unit}
    budget = Budget.objects.select_for_update().filter(**owner, period=period).order_by().first()
    before = {"amount": str(budget.amount), "enforcement": budget.enforcement} if budget else None
    if budget is None:
        budget = Budget(**owner, period=period)
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
    """Record (once each) the 50/80/100 % thresholds the spend has crossed (the team's, or all
    the teams' below the unit) and email the team's (the unit's) admins; and once, while the
    month is still running and the budget not yet passed, the day the forecast
    (`forecast.budget_forecast`) says it will be ("at this rate nlp exceeds its budget on
    Dec 21", "at this rate unit Organisation / Research exceeds ...").
    The alerts also show in the portal and the API."""
    if budget.amount <= 0:
        return []
    spent = budget_spend(budget)
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
    """The forecast alert of a team's or a unit's budget (`forecast.budget_forecast`: a unit's
    over all its teams together), recorded and mailed once per budget, so once a month; a
    racing check that loses the insert sends nothing."""
    from apps.billing.forecast import budget_forecast

    _, end = month_bounds(budget.period.month)
    if now >= end or spent >= budget.amount or budget.period.is_closed:
        return []
    if budget.alerts.filter(kind=BudgetAlert.Kind.FORECAST).exists():
        return []
    outlook = budget_forecast(budget, now=now)
    if outlook.exceeds_on is None:
        return []
    alert, created = BudgetAlert.objects.get_or_create(
        budget=budget,
        kind=BudgetAlert.Kind.FORECAST,
        threshold=100,
        defaults={
            "spent": spent.quantize(CENT),
            "exceeds_on": outlook.exceeds_on,
            "message": outlook.message,
        },
    )
    if not created:
        return []
    recipients = _team_admin_emails(budget)
    if recipients:
        who = (
            f"Team {budget.team.name} has"
            if budget.team_id
            else f"Unit {outlook.unit} (all its teams together) has"
        )
        outbox_send_mail(
            subject=f"[GPU portal] {outlook.message}",
            body=(
                f"{outlook.message}\n\n{who} been charged "
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
    """A team budget's admins are the team's; a unit budget's are the unit's."""
    if budget.team_id is None:
        admins = UnitMembership.objects.filter(unit_id=budget.unit_id)
    else:
        admins = Membership.objects.filter(team_id=budget.team_id, role=TeamRole.TEAM_ADMIN)
    return sorted(set(admins.values_list("user__email", flat=True)) - {""})


def budget_alerts_check_all(*, periods) -> int:
    count = 0
    budgets = Budget.objects.filter(period__in=periods).select_related("team", "unit", "period")
    for budget in budgets:
        count += len(budget_alerts_check(budget=budget))
    return count


def _email_budget_alert(budget: Budget, threshold: int, spent: Decimal) -> None:
    recipients = _team_admin_emails(budget)
    if not recipients:
        return
    subject = (
        f"[GPU portal] {budget.owner.slug} has used {threshold} % of its {budget.period} budget"
    )
    who = (
        f"Team {budget.team.name} has"
        if budget.team_id
        else f"Unit {unit_path_label(budget.unit)} (all its teams together) has"
    )
    body = (
        f"{who} been charged {format_money(spent)} of its "
        f"{format_money(budget.amount)} budget for {budget.period} ({threshold} % threshold)."
    )
    outbox_send_mail(subject=subject, body=body, recipients=list(recipients))


def check_booking_budget(*, team, gpu_model, count, start, end, over_quota_gpus=0) -> None:
    """Answers the `reservations.budget_check` query (portal.queries): a booking cannot cost more
    than is left of any `block` budget on the team's path (its own, its unit's, an ancestor
    unit's, which cover all their teams together) in any month the booking falls in; each
    month's part of the booking is weighed against that month's budgets. The booking is priced
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
    on_path = budgets_on_path(team=team, period=period)
    blocking = [b for b in on_path if b.enforcement == Enforcement.BLOCK]
    if not blocking:
        return
    # The tree (two queries) only when a unit's budget blocks: it says which teams it covers.
    tree = org_tree() if any(b.unit_id for b in blocking) else None
    if tree is not None:
        blocking = nearest_first(blocking, team=team, tree=tree)
    price = price_holding(
        gpu_model=gpu_model, count=count, start=start, end=end, over_quota_gpus=over_quota_gpus
    )
    cost = price.total
    # A free booking (no price yet) never spends anything, whatever the budget state.
    if cost <= 0:
        return
    charged = charged_by_team(period)
    for budget in blocking:
        team_ids = budget_team_ids(budget, tree=tree)
        spent = teams_spend(team_ids=team_ids, period=period, charged=charged)
        booked = booked_cost(team_ids=team_ids, period=period, now=now)
        left = budget.amount - spent - booked
        if cost <= left:
            continue
        available = max(left, Decimal(0)).quantize(CENT)
        whose = (
            f"{team.slug}'s"
            if budget.team_id
            else f"unit {unit_path_label(budget.unit, tree=tree)}'s"
        )
        raise PolicyRefusal(
            f"This booking would cost {format_money(cost)} in {period} but only "
            f"{format_money(available)} is left of {whose} {format_money(budget.amount)} "
            "budget for that month.",
            code="budget_exhausted",
            detail={
                "budget": str(budget.amount),
                "budget_team": budget.team.slug if budget.team_id else None,
                "budget_unit": budget.unit.slug if budget.unit_id else None,
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
