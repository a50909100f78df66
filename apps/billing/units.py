"""Money by organisation unit: a unit budget's state (spent, booked, left for all the teams
below it together) and the chargeback rows rolled up by unit."""

import json
from datetime import datetime
from decimal import Decimal

from django.db.models import F, Sum

from apps.billing.models import BillingPeriod, Budget, LedgerEntry
from apps.billing.money import ExactSum
from apps.billing.selectors import booked_cost, budget_team_ids, charged_by_team, teams_spend
from apps.teams.models import OrgUnit
from apps.teams.org_tree import OrgTree
from apps.teams.selectors import org_tree


def unit_budget_state(
    budget: Budget, *, now: datetime, tree: OrgTree | None = None, charged: dict | None = None
) -> dict:
    """Spent, booked ahead, left and the forecast month end (with its range, the day it passes
    the budget and the sentence saying so: `forecast.budget_forecast`) of a unit's budget, over
    every team below the unit (spent: the sum of the teams' charges, `charged_by_team`, read
    here unless given)."""
    from apps.billing.forecast import budget_forecast

    tree = tree or org_tree()
    team_ids = budget_team_ids(budget, tree=tree)
    spent = teams_spend(team_ids=team_ids, period=budget.period, charged=charged)
    booked = booked_cost(team_ids=team_ids, period=budget.period, now=now)
    left = budget.amount - spent
    outlook = budget_forecast(budget, now=now, tree=tree, charged=charged)
    return {
        "unit": budget.unit.slug,
        "unit_path": unit_path_label_from(tree, budget.unit_id),
        "budget": budget.amount,
        "enforcement": budget.enforcement,
        "teams": len(team_ids),
        "spent": spent,
        "booked": booked,
        "left": left,
        "left_after_bookings": left - booked,
        "projected": outlook.projected,
        "projected_low": outlook.projected_low,
        "projected_high": outlook.projected_high,
        "exceeds_on": outlook.exceeds_on,
        "message": outlook.message,
    }


def unit_budget_rows(*, user, period: BillingPeriod, now: datetime) -> list[dict]:
    """The unit budgets of the month the user may see (`Budget.objects.for_user`), with their
    state and alerts, in path order."""
    if period.pk is None:
        return []
    tree, charged = org_tree(), charged_by_team(period)
    budgets = (
        Budget.objects.for_user(user)
        .filter(period_id=period.pk, unit__isnull=False)
        .select_related("unit", "period")
        .prefetch_related("alerts")
    )
    rows = [
        {
            **unit_budget_state(b, now=now, tree=tree, charged=charged),
            "alerts": list(b.alerts.all()),
        }
        for b in budgets
    ]
    return sorted(rows, key=lambda row: row["unit_path"])


def unit_path_label_from(tree: OrgTree, unit_id: int, *, names: dict | None = None) -> str:
    """ "Organisation / Research" for a unit, from an already loaded tree (one query for the
    names unless given)."""
    path = tree.path(unit_id)
    names = names if names is not None else dict(OrgUnit.objects.values_list("pk", "name"))
    return " / ".join(names[pk] for pk in path)


NO_UNIT = {"unit_path": "", "unit_cost_center": "", "unit_label": ""}


def team_unit_columns() -> dict[int, dict]:
    """Per team id: its unit's path by slugs ("organisation/research"), by names
    ("Organisation / Research") and the unit's cost centre (the nearest unit up the path that
    has one, else the unit's slug), as exports, FOCUS rows and statements carry them.
    Two queries, whatever the number of teams."""
    tree = org_tree()
    rows = OrgUnit.objects.values_list("pk", "slug", "cost_center", "name")
    units = {pk: (slug, cost_center, name) for pk, slug, cost_center, name in rows}
    columns = {}
    for team_id, unit_id in tree.team_units.items():
        path = tree.path(unit_id) if unit_id is not None else []
        # As a team without a cost centre is charged under its slug, so is such a unit.
        cost_center = next((units[pk][1] for pk in reversed(path) if units[pk][1]), "")
        cost_center = cost_center or (units[unit_id][0] if unit_id is not None else "")
        columns[team_id] = {
            "unit_path": "/".join(units[pk][0] for pk in path),
            "unit_cost_center": cost_center,
            "unit_label": " / ".join(units[pk][2] for pk in path),
        }
    return columns


def focus_tags(units: dict, cost_center: str, team_id: int | None) -> str:
    """A FOCUS row's Tags: the team's cost centre and, for a team's row, its unit's path by
    slugs and the unit's cost centre."""
    tags = {"cost_center": cost_center}
    unit = units.get(team_id)
    if unit and unit["unit_path"]:
        tags["unit"] = unit["unit_path"]
        if unit["unit_cost_center"]:
            tags["unit_cost_center"] = unit["unit_cost_center"]
    return json.dumps(tags, sort_keys=True)


def unit_chargeback(period: BillingPeriod, *, unit_ids: set | None = None) -> list[dict]:
    """The month's chargeback rolled up by unit, in tree order (parents first, children by
    slug): each unit's cost, GPU-hours and number of charged teams over its whole subtree, and
    the rows of the teams directly in it. Every figure is a sum of the teams' rounded totals
    (`team_cost_totals`, as every export rounds them), so a unit reconciles to its teams to
    the cent.
    `unit_ids` limits the rows to those units (a unit admin's subtree); None: every unit."""
    tree = org_tree()
    units = {unit.pk: unit for unit in OrgUnit.objects.all()}
    names = {pk: unit.name for pk, unit in units.items()}
    by_team = {row["team_id"]: row for row in team_cost_totals(period)}
    result = []

    def visit(unit_id: int, depth: int) -> None:
        if unit_ids is None or unit_id in unit_ids:
            below = [by_team[t] for t in tree.teams_under(unit_id) if t in by_team]
            direct = [by_team[t] for t in tree.teams_directly_in(unit_id) if t in by_team]
            unit = units[unit_id]
            result.append(
                {
                    "unit": unit.slug,
                    "path": unit_path_label_from(tree, unit_id, names=names),
                    "cost_center": unit.cost_center,
                    "depth": depth,
                    "charged_teams": len(below),
                    "cost": sum((row["cost"] for row in below), Decimal(0)),
                    "gpu_hours": sum((row["gpu_hours"] for row in below), Decimal(0)),
                    "teams": sorted(
                        (_team_row(row) for row in direct), key=lambda row: row["team"]
                    ),
                }
            )
        for child in sorted(tree.children(unit_id), key=lambda pk: units[pk].slug):
            visit(child, depth + 1)

    roots = [pk for pk, parent in tree.parents.items() if parent is None]
    for root in sorted(roots, key=lambda pk: units[pk].slug):
        visit(root, 0)
    return result


def team_cost_totals(period: BillingPeriod) -> list[dict]:
    """Each charged team's rounded total cost and GPU-hours of the month, equal to the sum of its
    rounded export lines (`exports.team_totals`) but from one GROUP BY: the exports round every
    line with one running total over the teams in export order (`exports.RunningRounder`), so a
    team's lines add up to the rounded running total after it less the one before it."""
    from apps.billing.exports import RunningRounder, gpu_hours

    if period.pk is None:
        return []
    rows = (
        LedgerEntry.objects.filter(period_id=period.pk, team__isnull=False)
        .values("team_id", "team__slug")
        .annotate(exact=ExactSum("cost"), seconds=Sum("gpu_seconds"))
        .order_by(F("team__slug").asc(nulls_last=True))  # the exports' order
    )
    rounder = RunningRounder()
    return [
        {
            "team_id": row["team_id"],
            "sub_account": row["team__slug"],
            "cost": rounder.take(row["exact"] or Decimal(0)),
            "gpu_hours": gpu_hours(row["seconds"] or 0),
        }
        for row in rows
    ]


def _team_row(row: dict) -> dict:
    return {"team": row["sub_account"], "cost": row["cost"], "gpu_hours": row["gpu_hours"]}


def chargeback_units_for(user) -> set | None:
    """The units whose chargeback the user may read: None (all) for finance and platform
    admins; else the units they administer and every unit below (empty for anyone else)."""
    if user.is_authenticated and user.sees_all_teams:
        return None
    return set(OrgUnit.objects.managed_by(user).values_list("pk", flat=True))
