"""Reads for prices, the ledger, budgets and periods."""

from datetime import date, datetime, timedelta
from decimal import Decimal

from django.db.models import F, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from apps.billing.choices import PLATFORM_COST_CENTER
from apps.billing.models import BillingPeriod, Budget, BudgetAlert, LedgerEntry, RateCard
from apps.billing.money import ExactSum
from apps.billing.periods import add_months, month_bounds
from apps.billing.pricing import RateBook, energy_per_gpu_hour, price_holding
from apps.reservations.holdings import bookings_holding
from apps.teams.org_tree import OrgTree
from apps.teams.selectors import org_tree


def rate_card_at(*, gpu_model_name: str, at: datetime) -> RateCard | None:
    return (
        RateCard.objects.filter(Q(effective_to__isnull=True) | Q(effective_to__gt=at))
        .filter(effective_from__lte=at, gpu_model__name=gpu_model_name)
        .first()
    )


def price_per_gpu_hour(*, gpu_model_name: str, at: datetime) -> Decimal | None:
    """The list price of one GPU-hour of the model at that instant; None when unpriced."""
    card = rate_card_at(gpu_model_name=gpu_model_name, at=at)
    return card.price_per_gpu_hour if card else None


def period_for_month(month) -> BillingPeriod | None:
    return BillingPeriod.objects.filter(month=month).first()


def ledger_for_period(period: BillingPeriod) -> QuerySet[LedgerEntry]:
    """The period's entries; none for a month whose period row does not exist yet (reads never
    create it)."""
    return LedgerEntry.objects.filter(period_id=period.pk)


def charged_by_team(period: BillingPeriod | None) -> dict[int | None, Decimal]:
    """What each team (None: the platform) has been charged in the period so far, in cents, as
    every statement and export shows it: the sum of its rounded lines.

    Exports round the month's lines on one running total in their fixed order (teams by slug,
    the platform last), so a team's rounded lines add up to cents(total before it + its own)
    - cents(total before it). One GROUP BY gives every team's exact total; walking them in that
    order gives the same cents as the exports, without reading a line."""
    if period is None or period.pk is None:
        return {}
    from apps.billing.exports.lines import cents

    rows = (
        ledger_for_period(period)
        .values("team_id", "team__slug")
        .annotate(exact=ExactSum("cost"))
        .order_by(F("team__slug").asc(nulls_last=True))
    )
    charged, before = {}, Decimal(0)
    for row in rows:
        exact = row["exact"] or Decimal(0)
        charged[row["team_id"]] = cents(before + exact) - cents(before)
        before += exact
    return charged


# The unit and every unit above it, as a subquery (the depth bound stops a cycle, which the
# services refuse anyway, from looping).
UNIT_ANCESTORS_SQL = """
WITH RECURSIVE up(id, parent_id, depth) AS (
    SELECT id, parent_id, 0 FROM teams_orgunit WHERE id = %s
    UNION
    SELECT u.id, u.parent_id, up.depth + 1 FROM teams_orgunit u JOIN up ON u.id = up.parent_id
    WHERE up.depth < 64
) SELECT id FROM up"""


def budgets_on_path(*, team, period: BillingPeriod | None) -> list[Budget]:
    """The month's budgets that cover the team: its own, its unit's and each ancestor unit's
    (one query; the booking path runs it on every booking)."""
    if period is None:
        return []
    above = Q(team_id=team.pk)
    if team.unit_id:
        ancestors = RawSQL(UNIT_ANCESTORS_SQL, [team.unit_id])  # noqa: S611 - constant SQL
        above |= Q(unit_id__in=ancestors)
    found = Budget.objects.filter(above, period_id=period.pk).order_by()
    return list(found.select_related("team", "unit", "period"))


def nearest_first(budgets: list[Budget], *, team, tree: OrgTree) -> list[Budget]:
    """The team's own budget first, then its unit's, then each ancestor's up to the root."""
    rank = {pk: depth for depth, pk in enumerate(tree.ancestors(team.unit_id), start=1)}
    return sorted(budgets, key=lambda b: 0 if b.team_id else rank.get(b.unit_id, len(rank) + 1))


def budget_team_ids(budget: Budget, *, tree: OrgTree | None = None) -> list[int]:
    """The teams whose spend a budget covers: its team, or every team below its unit."""
    if budget.team_id:
        return [budget.team_id]
    return sorted((tree or org_tree()).teams_under(budget.unit_id))


def teams_spend(*, team_ids, period: BillingPeriod | None, charged: dict | None = None) -> Decimal:
    """Everything charged to these teams together in the period so far: the sum of their
    charges as each team's statement shows it (`charged_by_team`; pass `charged` when it is
    already read)."""
    if charged is None:
        charged = charged_by_team(period)
    return sum((charged.get(team_id, Decimal(0)) for team_id in team_ids), Decimal(0))


def budget_spend(budget: Budget, *, tree: OrgTree | None = None) -> Decimal:
    """What the budget's team, or all the teams below its unit, have been charged so far."""
    return teams_spend(team_ids=budget_team_ids(budget, tree=tree), period=budget.period)


def budget_alerts_for_teams(team_ids) -> QuerySet[BudgetAlert]:
    return BudgetAlert.objects.filter(budget__team_id__in=team_ids).select_related(
        "budget__team", "budget__period"
    )


def burn_down(*, team, period: BillingPeriod, now: datetime) -> dict:
    """Spent, booked, left and the forecast month end with its range (`forecast.forecast`)."""
    from apps.billing.forecast import forecast

    return forecast(team=team, period=period, now=now).as_dict()


def daily_spend(*, team_ids, period: BillingPeriod) -> list[tuple]:
    """(day, cost) of these teams' ledger together in the period, for the burn-down chart;
    days are the reader's (the current zone's)."""
    return spend_of(daily_spend_by_team(team_ids=team_ids, period=period), team_ids)


def daily_spend_by_team(*, team_ids, period: BillingPeriod) -> dict[int, dict]:
    """{team id: {day: cost}} of these teams' ledger in the period, in one GROUP BY team and
    day (the reader's days, the current zone's); `spend_of` adds teams together."""
    from django.db.models.functions import TruncDate

    rows = (
        ledger_for_period(period)
        .filter(team_id__in=list(team_ids))
        .annotate(day=TruncDate("slice_start", tzinfo=timezone.get_current_timezone()))
        .values("team_id", "day")
        .annotate(total=ExactSum("cost"))
        .order_by()
    )
    by_team: dict[int, dict] = {}
    for row in rows:
        by_team.setdefault(row["team_id"], {})[row["day"]] = row["total"]
    return by_team


def spend_of(by_team: dict[int, dict], team_ids) -> list[tuple]:
    """(day, cost) of these teams together, by day, from `daily_spend_by_team`: the sum of
    their exact day sums is the exact sum of their lines, as one GROUP BY day gives it."""
    days: dict = {}
    for team_id in team_ids:
        for day, total in by_team.get(team_id, {}).items():
            days[day] = days[day] + total if day in days else total
    return sorted(days.items())


def price_gpu_hours(*, hours_by_model: dict, at) -> Decimal | None:
    """List price of GPU-hours per model {model name: (hours, of which over quota)} at the
    rates in force at `at`, over-quota hours at the multiplier; None when a model has no rate
    card. Answers the `gpu_hours.price` query (the what-if page)."""
    rates = RateBook(start=at, end=at + timedelta(seconds=1))
    total = Decimal(0)
    for model, (hours, over) in hours_by_model.items():
        cost = rates.cost(model, hours=hours, over_hours=over, at=at)
        if cost is None:
            return None
        total += cost
    return total.quantize(Decimal("0.01"))


def price_energy(*, kwh_by_model: dict, at) -> Decimal | None:
    """Price of energy per model {model name: kWh} at the energy price of the rate card in
    force at `at`; None when a model with energy has no card or its card prices no energy.
    Answers the `energy.price` query (the what-if page: what power saving saves)."""
    rates = RateBook(start=at, end=at + timedelta(seconds=1))
    total = Decimal(0)
    for model, kwh in kwh_by_model.items():
        if not kwh:
            continue
        card = rates.card_at(model, at)
        if card is None or card.energy_price_per_kwh is None:
            return None
        total += Decimal(str(kwh)) * card.energy_price_per_kwh
    return total.quantize(Decimal("0.01"))


def team_total_all(period: BillingPeriod) -> Decimal:
    """Everything charged in the period, all teams and the platform (exact)."""
    return ledger_for_period(period).aggregate(t=ExactSum("cost"))["t"] or Decimal(0)


def booked_cost(*, team=None, team_ids=None, period: BillingPeriod, now: datetime) -> Decimal:
    """What the team's (or these teams') bookings will cost in the period from now on (not yet
    metered); for a month still ahead, only their part in that month."""
    period_start, period_end = month_bounds(period.month)
    since = max(now, period_start)
    ids = [team.pk] if team is not None else list(team_ids)
    holdings = (
        bookings_holding(since, period_end)
        .filter(reservation__team_id__in=ids)
        .select_related("gpu__model")
    )
    rates = RateBook(start=since, end=period_end)
    energy: dict[int, Decimal] = {}
    total = Decimal(0)
    for holding in holdings:
        model = holding.gpu.model
        if model.pk not in energy:
            energy[model.pk] = energy_per_gpu_hour(model.pk, now=now)
        total += price_holding(
            gpu_model=model,
            count=1,
            start=max(holding.start, since),
            end=min(holding.end, period_end),
            over_quota_gpus=int(holding.over_quota),
            rates=rates,
            kwh_per_gpu_hour=energy[model.pk],
        ).exact_total
    return total


def cost_by_source(*, source: str, ids) -> dict[int, Decimal]:
    """Everything the ledger charged so far to each job or reservation (by id), corrections
    included (exact); ids never charged are absent."""
    rows = (
        LedgerEntry.objects.filter(source=source, source_id__in=list(ids))
        .values("source_id")
        .annotate(total=ExactSum("cost"))
        .order_by()
    )
    return {row["source_id"]: row["total"] or Decimal(0) for row in rows}


def empty_team_row(team_id, sub_account: str) -> dict:
    """A chargeback page row of a team charged nothing this month."""
    return {
        "team_id": team_id, "sub_account": sub_account, "cost": Decimal(0),
        "gpu_hours": Decimal(0), "busy_gpu_hours": Decimal(0),
        "held_idle_gpu_hours": Decimal(0), "busy_cost": Decimal(0),
        "held_idle_cost": Decimal(0), "over_quota_cost": Decimal(0),
        "energy_cost": Decimal(0), "adjustment_cost": Decimal(0),
        "previous_cost": None, "change": Decimal(0), "change_percent": None,
    }  # fmt: skip


def team_totals_with_previous_month(period: BillingPeriod) -> tuple[list[dict], date]:
    """The chargeback page's team rows (`exports.team_totals`), each with the team's total of
    the month before, the change and the change in percent (None where the team had no cost
    then), and rows for teams charged only the month before; and that month."""
    from apps.billing.exports import team_totals

    previous_month = add_months(period.month, -1)
    previous_period = period_for_month(previous_month)
    rows = team_totals(period) if period.pk else []
    before = (
        {row["sub_account"]: row for row in team_totals(previous_period)} if previous_period else {}
    )
    for row in rows:
        earlier = before.pop(row["sub_account"], None)
        _compare(row, earlier["cost"] if earlier else None)
    for gone in before.values():  # charged last month, nothing this month
        row = empty_team_row(gone["team_id"], gone["sub_account"])
        _compare(row, gone["cost"])
        rows.append(row)
    return rows, previous_month


def _compare(row: dict, previous: Decimal | None) -> None:
    row["previous_cost"] = previous
    row["change"] = row["cost"] - (previous or Decimal(0))
    row["change_percent"] = change_percent(row["cost"], previous)


def change_percent(now: Decimal, before: Decimal | None) -> Decimal | None:
    """Change from `before` to `now` in percent of `before` (one decimal); None without a
    figure to compare with (nothing, or zero, before)."""
    if not before:
        return None
    return ((now - before) * 100 / abs(before)).quantize(Decimal("0.1"))


# The figures of a team's month that add up across teams (all rounded as the exports round).
SUMMED_TOTALS = (
    "gpu_hours", "busy_gpu_hours", "held_idle_gpu_hours", "cost", "held_idle_cost",
    "over_quota_cost",
)  # fmt: skip


def grouped_totals(totals: list[dict], group_units: dict | None) -> list[dict]:
    """`exports.team_totals` rows per team by slug, or per unit with `group_units` (team slug
    -> the unit it is grouped under, `teams.selectors.unit_scope`) by unit name; then the
    platform's row. Each row: name, kind (team, unit, platform), unit (the unit's slug, for a
    unit's row), teams (slugs) and the `SUMMED_TOTALS`. A unit's figures are sums of its teams'
    rounded totals, so a unit's cost is its teams' to the cent."""
    rows: dict[str, dict] = {}
    platform = []
    for total in totals:
        figures = {key: total[key] for key in SUMMED_TOTALS}
        if total["team_id"] is None:
            platform.append(
                {"name": PLATFORM_COST_CENTER, "kind": "platform", "unit": None, "teams": [],
                 **figures}
            )  # fmt: skip
            continue
        slug = total["team__slug"]
        if group_units is None or slug not in group_units:
            rows[slug] = {"name": slug, "kind": "team", "unit": None, "teams": [slug], **figures}
            continue
        unit = group_units[slug]
        row = rows.setdefault(
            unit.name,
            {"name": unit.name, "kind": "unit", "unit": unit.slug, "teams": [],
             **dict.fromkeys(SUMMED_TOTALS, Decimal(0))},
        )  # fmt: skip
        row["teams"].append(slug)
        for key in SUMMED_TOTALS:
            row[key] += figures[key]
    return [rows[name] for name in sorted(rows)] + platform
