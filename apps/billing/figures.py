"""Plotly figures of the cost dashboard, built from the ledger (never from raw telemetry)."""

from datetime import timedelta
from decimal import Decimal
from functools import cache

import plotly.graph_objects as go
from django.conf import settings

from apps.billing import energy, exports, selectors
from apps.billing.choices import BUDGET_THRESHOLDS, PLATFORM_COST_CENTER
from apps.billing.forecast import ForecastReads, forecast, teams_forecast
from apps.billing.models import BillingPeriod, Budget, LedgerEntry
from apps.billing.money import ExactSum
from apps.billing.periods import month_bounds
from apps.teams.selectors import org_tree
from portal.plotting import GREY, LAYOUT, PALETTE
from portal.plotting import figure_json as _figure_json
from portal.timezones import current_zone, local_day

MONTHS_SHOWN = 6


def cost_figures(
    *, period: BillingPeriod, teams: list, include_platform: bool, now, group_units=None
) -> dict:
    """Figures and numbers of the cost dashboard for the given teams (and, when
    `include_platform`, the platform's idle capacity and the capacity powered down to save
    energy: `powered_off`, per GPU model, with what it saved). `group_units` (team slug -> the
    unit it is grouped under, `teams.selectors.unit_scope`) sums the teams' rows, month bars,
    over-quota shares and burn-down per unit. `rows`: one per team (per unit), then the
    platform."""
    team_ids = [t.pk for t in teams]
    group_of = (
        None if group_units is None else {slug: unit.name for slug, unit in group_units.items()}
    )
    every_team = exports.team_totals(period)
    totals = [
        t
        for t in every_team
        if t["team_id"] in team_ids or (include_platform and t["team_id"] is None)
    ]
    # What each team was charged, as the forecasts count it: the same cents as these rows
    # (`selectors.charged_by_team` gives them; the reconciliation tests hold the two equal),
    # so the month is not summed a second time.
    charged = {t["team_id"]: t["cost"] for t in every_team}
    rows = selectors.grouped_totals(totals, group_units)
    return {
        "totals": totals,
        "rows": rows,
        "grouped": group_of is not None,
        "total_cost": sum((t["cost"] for t in totals), Decimal(0)),
        "total_gpu_hours": sum((t["gpu_hours"] for t in totals), Decimal(0)),
        "has_data": any(t["gpu_hours"] or t["cost"] for t in totals),
        "powered_off": _powered_off(period, now) if include_platform else None,
        "figures": {
            "cost-by-month": _by_month(period, team_ids, include_platform, group_of),
            "burn-down": _burn_down(period, teams, now, group_units, charged),
            "by-model": _by_model(period, team_ids, include_platform),
            "over-quota": _over_quota(rows),
        },
    }


def _powered_off(period: BillingPeriod, now) -> dict:
    """The month's powered-off GPU-hours and energy saved per GPU model, and their totals (up
    to now in an open month)."""
    start, end = month_bounds(period.month)
    models = energy.powered_off_by_model(start, min(end, now)) if start < now else []
    return {
        "models": models,
        "gpu_hours": sum((m.gpu_hours for m in models), Decimal(0)),
        "energy_saved_kwh": sum((m.energy_saved_kwh for m in models), Decimal(0)),
        "energy_saved_cost": sum((m.energy_saved_cost for m in models), Decimal(0)),
        "unmeasured_gpus": sum(m.unmeasured_gpus for m in models),
    }


def _money_axis() -> dict:
    return {"title": f"Cost ({settings.BILLING_CURRENCY})", "tickformat": ",.0f"}


def _scoped(entries, team_ids, include_platform):
    if include_platform:
        return entries.filter(team_id__in=team_ids) | entries.filter(team__isnull=True)
    return entries.filter(team_id__in=team_ids)


def _by_month(period, team_ids, include_platform, group_of=None) -> dict:
    periods = list(BillingPeriod.objects.filter(month__lte=period.month)[:MONTHS_SHOWN])[::-1]
    entries = _scoped(LedgerEntry.objects.filter(period__in=periods), team_ids, include_platform)
    rows = entries.values("period__month", "team__slug").annotate(total=ExactSum("cost"))
    by_team: dict[str, dict] = {}
    for row in rows:
        slug = row["team__slug"]
        name = (group_of or {}).get(slug, slug) if slug else PLATFORM_COST_CENTER
        month = by_team.setdefault(name, {})
        month[row["period__month"]] = month.get(row["period__month"], Decimal(0)) + row["total"]
    months = [p.month for p in periods]
    figure = go.Figure(
        layout={
            **LAYOUT,
            "barmode": "stack",
            "yaxis": _money_axis(),
            "xaxis": {"type": "category", "title": "Month"},
        }
    )
    for name in sorted(by_team, key=lambda n: (n == PLATFORM_COST_CENTER, n)):
        figure.add_bar(
            name=name,
            x=[f"{m:%Y-%m}" for m in months],
            y=[float(by_team[name].get(m, 0)) for m in months],
        )
    return _figure_json(figure)


def _burn_down_owners(period, teams, group_units, now, charged) -> list[tuple]:
    """What the burn-down draws a line for, at most one per colour: (name, team ids, forecast)
    per team, or with `group_units` per unit (its teams together, `forecast.teams_forecast`),
    against the unit's budget only when all the unit's teams are in view: a reader who sees
    part of a unit gets the part's spend and pace, not a budget that covers teams hidden from
    them. The teams' charges, budgets, recent days and bookings are read once for all the
    lines drawn (`forecast.ForecastReads`), each only when the first forecast needs it;
    `charged` is every team's charge of the month (`selectors.charged_by_team`)."""
    drawn = len(PALETTE)

    if group_units is None:
        shown = teams[:drawn]

        @cache
        def reads() -> tuple:
            budgets = {
                budget.team_id: budget
                for budget in Budget.objects.filter(
                    period_id=period.pk, team_id__in=[team.pk for team in shown]
                )
            } if period.pk else {}  # fmt: skip
            return budgets, ForecastReads(
                team_ids=[team.pk for team in shown], period=period, now=now
            )

        def team_outlook(team):
            budgets, ledger = reads()
            return forecast(team=team, period=period, now=now, charged=charged,
                            budgets=budgets, reads=ledger)  # fmt: skip

        return [(team.slug, [team.pk], lambda team=team: team_outlook(team)) for team in shown]
    tree = org_tree()
    members: dict[int, list[int]] = {}
    units = {}
    for team in teams:
        unit = group_units[team.slug]
        units[unit.pk] = unit
        members.setdefault(unit.pk, []).append(team.pk)
    shown = sorted(members, key=lambda unit_id: units[unit_id].name)[:drawn]
    budgets = {
        budget.unit_id: budget
        for budget in Budget.objects.filter(period_id=period.pk, unit_id__in=shown)
    } if period.pk else {}  # fmt: skip

    @cache
    def ledger() -> ForecastReads:
        ids = [team_id for unit_id in shown for team_id in members[unit_id]]
        return ForecastReads(team_ids=ids, period=period, now=now)

    owners = []
    for unit_id in shown:
        ids = members[unit_id]
        whole = set(ids) == tree.teams_under(unit_id)
        budget = budgets.get(unit_id) if whole else None
        name = units[unit_id].name

        def outlook_of(ids=ids, budget=budget, name=name):
            return teams_forecast(
                team_ids=ids, budget=budget, period=period, now=now, unit=name,
                charged=charged, reads=ledger(),
            )  # fmt: skip

        owners.append((name, ids, outlook_of))
    return owners


def _burn_down(period, teams, now, group_units, charged) -> dict:
    """Cumulative spend and projection per team (per unit with `group_units`) in money (top
    panel), and the same as a share of each team's (unit's) budget (bottom panel, with the
    50/80/100 % alert lines). Budgets are often
    many times a month's spend so far: on the money axis they would flatten the spend lines to
    zero, so they get their own panel and axis."""
    start, end = month_bounds(period.month)
    # The UTC month as the reader's days: in New York it starts on the last evening before.
    last_day = local_day(end - timedelta(seconds=1)).isoformat()
    days = [local_day(start).isoformat(), last_day]
    # Two panels sharing the day axis, laid out by hand (make_subplots costs ~0.1 s a page).
    figure = go.Figure(
        layout={
            **LAYOUT,
            "margin": {**LAYOUT["margin"], "r": 60},
            "height": 520,
            "hovermode": "x unified",
            # Dates under both panels: the top one is read alone when no budget is set.
            "xaxis": {"type": "date", "range": days, "anchor": "y", "matches": "x2",
                      "tickformat": "%b %-d"},
            "yaxis": {"title": {"text": f"Cumulative cost ({settings.BILLING_CURRENCY})"},
                      "domain": [0.42, 1], "rangemode": "tozero", "tickformat": ",.0f"},
            # Whole days in the reader's zone (dates, not moments: figure_json leaves them).
            "xaxis2": {"type": "date", "range": days, "anchor": "y2",
                       "title": {"text": f"Day ({current_zone().key})"}},
            "yaxis2": {"title": {"text": "Budget used (%)"}, "domain": [0, 0.34], "anchor": "x2",
                       "rangemode": "tozero", "ticksuffix": " %"},
        }
    )  # fmt: skip
    with_budget = False
    owners = _burn_down_owners(period, teams, group_units, now, charged)
    # One GROUP BY team and day for every line drawn, not one query per line.
    spend = selectors.daily_spend_by_team(
        team_ids=[team_id for _, team_ids, _ in owners for team_id in team_ids], period=period
    )
    for index, (name, team_ids, outlook_of) in enumerate(owners):
        colour = PALETTE[index]
        running, xs, ys = Decimal(0), [], []
        for day, total in selectors.spend_of(spend, team_ids):
            running += total
            xs.append(day.isoformat())
            ys.append(running)
        if not xs:
            continue
        outlook = outlook_of()
        budget = outlook.budget
        lines = [(f"{name} spent", xs, ys, {"color": colour})]
        if now < end and outlook.days:
            ahead = [xs[-1]] + [day.isoformat() for day, *_ in outlook.days]
            for label, position, dash in (
                ("forecast, low", 2, "dot"),
                ("forecast, high", 3, "dot"),
                ("forecast", 1, "dash"),
            ):
                values = [ys[-1]] + [row[position] for row in outlook.days]
                lines.append((f"{name} {label}", ahead, values, {"color": colour, "dash": dash,
                              "width": 1 if "," in label else 2}))  # fmt: skip
        group = name
        for name, x, y, line in lines:
            figure.add_scatter(
                x=x, y=[float(v) for v in y], mode="lines+markers" if "spent" in name else "lines",
                name=name, line=line, legendgroup=group,
                hovertemplate=f"%{{y:,.2f}} {settings.BILLING_CURRENCY}",
            )  # fmt: skip
            if budget:
                with_budget = True
                figure.add_scatter(
                    x=x, y=[float(v / budget * 100) for v in y], mode="lines",
                    name=f"{name}, % of budget", line=line, legendgroup=group,
                    showlegend=False, xaxis="x2", yaxis="y2",
                    hovertemplate="%{y:.1f} % of " + f"{budget:,.2f} {settings.BILLING_CURRENCY}",
                )  # fmt: skip
    if with_budget:
        for level in BUDGET_THRESHOLDS:
            figure.add_shape(
                type="line", xref="x2 domain", x0=0, x1=1, yref="y2", y0=level, y1=level,
                line={"color": GREY, "width": 1, "dash": "dash"},
                label={"text": f"{level} %", "textposition": "end", "font": {"size": 11}},
            )  # fmt: skip
    else:
        figure.add_annotation(
            text="No budget set for this month", xref="x2 domain", yref="y2 domain",
            x=0.5, y=0.5, showarrow=False,
        )  # fmt: skip
    return _figure_json(figure)


def _by_model(period, team_ids, include_platform) -> dict:
    entries = _scoped(LedgerEntry.objects.filter(period_id=period.pk), team_ids, include_platform)
    rows = (
        entries.exclude(gpu_model__isnull=True)
        .values("gpu_model__name")
        .annotate(total=ExactSum("cost"))
        .order_by("gpu_model__name")
    )
    figure = go.Figure(layout={**LAYOUT, "yaxis": _money_axis(), "xaxis": {"title": "GPU model"}})
    figure.add_bar(x=[r["gpu_model__name"] for r in rows], y=[float(r["total"]) for r in rows],
                   marker_color=PALETTE[0], name="cost")  # fmt: skip
    return _figure_json(figure)


def _over_quota(rows) -> dict:
    shown = [row for row in rows if row["kind"] != "platform"]
    grouped = any(row["kind"] == "unit" for row in shown)
    figure = go.Figure(
        layout={
            **LAYOUT,
            "barmode": "stack",
            "yaxis": _money_axis(),
            "xaxis": {"title": "Unit" if grouped else "Team"},
        }
    )
    names = [row["name"] for row in shown]
    figure.add_bar(name="within guarantee", x=names,
                   y=[float(row["cost"] - row["over_quota_cost"]) for row in shown])  # fmt: skip
    figure.add_bar(name="over quota", x=names, y=[float(row["over_quota_cost"]) for row in shown])
    return _figure_json(figure)
