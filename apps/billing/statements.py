"""Monthly statements: what one team is charged for one month, as finance sends it.

A statement is built from the same detail lines as the exports, rounded by the same rule and
summed by the database (`exports.query.rounded_groups`), so its lines by GPU model and source,
its idle and over-quota shares, its adjustments and its total equal the CSV, XLSX, JSON and
FOCUS exports of the month to the cent. An open month's statement is a draft: its invoice id
says so, and the page and the file say so at the top. Beside the charges, a statement notes the
fleet's capacity powered down that month to save energy, which nobody was charged for
(`energy.py`).
"""

import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from apps.billing.choices import ChargeSource
from apps.billing.energy import powered_off_by_model
from apps.billing.exports import adjustment_labels, gpu_hours
from apps.billing.exports.query import rounded_groups
from apps.billing.invoices import invoice_id
from apps.billing.models import Adjustment, BillingPeriod, Budget
from apps.billing.periods import month_bounds
from apps.billing.units import NO_UNIT, team_unit_columns
from apps.teams.models import Team


@dataclass
class StatementLine:
    gpu_model: str
    source: str
    gpu_seconds: int = 0
    held_idle_seconds: int = 0
    over_quota_seconds: int = 0
    cost: Decimal = Decimal(0)
    busy_cost: Decimal = Decimal(0)
    held_idle_cost: Decimal = Decimal(0)
    over_quota_cost: Decimal = Decimal(0)
    energy_cost: Decimal = Decimal(0)

    @property
    def source_label(self) -> str:
        return ChargeSource(self.source).label

    @property
    def gpu_hours(self) -> Decimal:
        return gpu_hours(self.gpu_seconds)

    @property
    def held_idle_gpu_hours(self) -> Decimal:
        return gpu_hours(self.held_idle_seconds)

    @property
    def over_quota_gpu_hours(self) -> Decimal:
        return gpu_hours(self.over_quota_seconds)


@dataclass
class StatementAdjustment:
    adjustment_id: int
    amount: Decimal
    reason: str = ""
    corrects: str = ""
    label: str = ""


@dataclass
class Statement:
    period: BillingPeriod
    team: Team
    lines: list[StatementLine] = field(default_factory=list)
    adjustments: list[StatementAdjustment] = field(default_factory=list)
    budget: Budget | None = None
    currency: str = ""
    # The team's unit ("Organisation / Research") and its cost centre (`units.team_unit_columns`)
    unit: dict = field(default_factory=dict)
    # The fleet's GPU-hours powered down this month and the energy and money that saved
    # (`fleet_powered_off`); None when no node was
    powered_off: dict | None = None

    @property
    def draft(self) -> bool:
        return not self.period.is_closed

    @property
    def invoice_id(self) -> str:
        return invoice_id(self.period, self.team.slug)

    @property
    def usage_total(self) -> Decimal:
        return sum((line.cost for line in self.lines), Decimal(0))

    @property
    def adjustments_total(self) -> Decimal:
        return sum((a.amount for a in self.adjustments), Decimal(0))

    @property
    def total(self) -> Decimal:
        return self.usage_total + self.adjustments_total

    @property
    def gpu_hours(self) -> Decimal:
        return sum((line.gpu_hours for line in self.lines), Decimal(0))

    @property
    def held_idle_gpu_hours(self) -> Decimal:
        return sum((line.held_idle_gpu_hours for line in self.lines), Decimal(0))

    @property
    def over_quota_gpu_hours(self) -> Decimal:
        return sum((line.over_quota_gpu_hours for line in self.lines), Decimal(0))

    @property
    def busy_cost(self) -> Decimal:
        return sum((line.busy_cost for line in self.lines), Decimal(0))

    @property
    def held_idle_cost(self) -> Decimal:
        return sum((line.held_idle_cost for line in self.lines), Decimal(0))

    @property
    def over_quota_cost(self) -> Decimal:
        return sum((line.over_quota_cost for line in self.lines), Decimal(0))

    @property
    def energy_cost(self) -> Decimal:
        return sum((line.energy_cost for line in self.lines), Decimal(0))

    @property
    def budget_left(self) -> Decimal | None:
        return None if self.budget is None else self.budget.amount - self.total

    @property
    def budget_used_percent(self) -> Decimal | None:
        if self.budget is None or not self.budget.amount:
            return None
        return (self.total * 100 / self.budget.amount).quantize(Decimal("0.1"))


def team_statement(period: BillingPeriod, team) -> Statement:
    """The statement of one team for one month (empty when nothing was charged)."""
    statements = _build(period, [team], team_id=team.pk)
    return statements[0]


def team_statements(period: BillingPeriod, teams: Iterable | None = None) -> list[Statement]:
    """Statements of every team charged in the month (or of `teams`), in one pass over the
    month's lines."""
    if teams is None:
        charged = period.entries.filter(team__isnull=False).values("team_id") if period.pk else []
        teams = Team.objects.filter(pk__in=charged).order_by("slug")
    return _build(period, list(teams), team_id=None)


def _build(period: BillingPeriod, teams: list, *, team_id: int | None) -> list[Statement]:
    currency = settings.BILLING_CURRENCY
    units = team_unit_columns()
    by_team = {
        team.pk: Statement(
            period=period, team=team, currency=currency, unit=units.get(team.pk, NO_UNIT)
        )
        for team in teams
    }
    if period.pk is None:
        return list(by_team.values())
    powered_off = fleet_powered_off(period)
    for statement in by_team.values():
        statement.powered_off = powered_off
    groups: dict[tuple, StatementLine] = {}
    adjustment_amounts: dict[tuple, Decimal] = {}
    names = adjustment_labels(period)
    labels: dict[int, str] = {}
    # The month's lines rounded and summed by the database (the same figures as the exports').
    for total in rounded_groups(period, team_id):
        if total["team_id"] not in by_team:
            continue
        if total["source"] == ChargeSource.ADJUSTMENT:
            pk = total["adjustment_id"]
            key = (total["team_id"], pk)
            adjustment_amounts[key] = adjustment_amounts.get(key, Decimal(0)) + total["cost"]
            labels[pk] = names.get(pk, f"Adjustment #{pk}")
            continue
        key = (total["team_id"], total["gpu_model__name"] or "", total["source"])
        group = groups.setdefault(key, StatementLine(gpu_model=key[1], source=key[2]))
        group.gpu_seconds += total["sum_gpu_seconds"]
        group.held_idle_seconds += total["held_idle_seconds"]
        group.over_quota_seconds += total["over_quota_seconds"]
        group.cost += total["cost"]
        group.busy_cost += total["busy_cost"]
        group.held_idle_cost += total["held_idle_cost"]
        group.over_quota_cost += total["over_quota_cost"]
        group.energy_cost += total["energy_cost"]
    for (owner, _, _), group in sorted(groups.items(), key=lambda item: item[0][1:]):
        by_team[owner].lines.append(group)
    _attach_adjustments(by_team, adjustment_amounts, labels)
    budgets = Budget.objects.filter(period_id=period.pk, team_id__in=list(by_team))
    for budget in budgets:
        by_team[budget.team_id].budget = budget
    return list(by_team.values())


def fleet_powered_off(period: BillingPeriod) -> dict | None:
    """The fleet's GPU-hours powered down in the month (up to now while it is open), the energy
    saved and its price, summed over GPU models; None when no node was powered down."""
    start, end = month_bounds(period.month)
    now = timezone.now()
    models = powered_off_by_model(start, min(end, now)) if start < now else []
    if not models:
        return None
    return {
        "gpu_hours": sum((m.gpu_hours for m in models), Decimal(0)),
        "energy_saved_kwh": sum((m.energy_saved_kwh for m in models), Decimal(0)),
        "energy_saved_cost": sum((m.energy_saved_cost for m in models), Decimal(0)),
    }


def _attach_adjustments(
    by_team: dict, amounts: dict[tuple, Decimal], labels: dict[int, str]
) -> None:
    details = Adjustment.objects.filter(pk__in=[pk for _, pk in amounts]).select_related(
        "corrects_period"
    )
    reasons = {a.pk: a for a in details}
    for (owner, pk), amount in sorted(amounts.items(), key=lambda item: item[0][1]):
        adjustment = reasons.get(pk)
        by_team[owner].adjustments.append(
            StatementAdjustment(
                adjustment_id=pk,
                amount=amount,
                reason=adjustment.reason if adjustment else "",
                corrects=str(adjustment.corrects_period or "") if adjustment else "",
                label=labels.get(pk, ""),
            )
        )


def statements_zip_file(
    period: BillingPeriod, render: Callable[[Statement], str], teams: Iterable | None = None
):
    """Every team's statement of the month as one ZIP of printable HTML files, written one
    statement at a time to a temporary file (returned open, at its start), so memory holds one
    statement, not the archive. A failure part-way leaves no file behind."""
    handle = tempfile.TemporaryFile(suffix=".zip")  # noqa: SIM115 - handed to the response
    suffix = "-draft" if not period.is_closed else ""
    try:
        with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for statement in team_statements(period, teams):
                name = f"statement-{period.month:%Y-%m}-{statement.team.slug}{suffix}.html"
                archive.writestr(name, render(statement))
    except BaseException:
        handle.close()
        raise
    handle.seek(0)
    return handle
