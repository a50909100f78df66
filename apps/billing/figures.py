"""Plotly figures of the cost dashboard, built from the ledger (never from raw telemetry)."""

from datetime import timedelta
from decimal import Decimal

import plotly.graph_objects as go
from django.db.models import Sum

from apps.billing import exports, selectors
from apps.billing.choices import PLATFORM_COST_CENTER
from apps.billing.models import BillingPeriod, LedgerEntry
from apps.billing.periods import month_bounds
from apps.dashboards.figures import LAYOUT, PALETTE
from apps.dashboards.figures import figure_json as _figure_json

MONTHS_SHOWN = 6


def cost_figures(*, period: BillingPeriod, teams: list, include_platform: bool, now) -> dict:
    """Figures and numbers of the cost dashboard for the given teams (and the platform's idle
    capacity when `include_platform`)."""
    team_ids = [t.pk for t in teams]
    totals = [
        t
        for t in exports.team_totals(period)
        if t["team_id"] in team_ids or (include_platform and t["team_id"] is None)
    ]
    return {
        "totals": totals,
        "total_cost": sum((t["cost"] for t in totals), Decimal(0)),
        "total_gpu_hours": sum((t["gpu_hours"] for t in totals), Decimal(0)),
        "has_data": any(t["gpu_hours"] or t["cost"] for t in totals),
        "figures": {
            "cost-by-month": _by_month(period, team_ids, include_platform),
            "burn-down": _burn_down(period, teams, now),
            "by-model": _by_model(period, team_ids, include_platform),
            "over-quota": _over_quota(totals),
        },
    }


def _scoped(entries, team_ids, include_platform):
    if include_platform:
        return entries.filter(team_id__in=team_ids) | entries.filter(team__isnull=True)
    return entries.filter(team_id__in=team_ids)


def _by_month(period, team_ids, include_platform) -> dict:
    periods = list(BillingPeriod.objects.filter(month__lte=period.month)[:MONTHS_SHOWN])[::-1]
    entries = _scoped(LedgerEntry.objects.filter(period__in=periods), team_ids, include_platform)
    rows = entries.values("period__month", "team__slug").annotate(total=Sum("cost"))
    by_team: dict[str, dict] = {}
    for row in rows:
        name = row["team__slug"] or PLATFORM_COST_CENTER
        by_team.setdefault(name, {})[row["period__month"]] = row["total"]
    months = [p.month for p in periods]
    figure = go.Figure(
        layout={
            **LAYOUT,
            "barmode": "stack",
            "yaxis": {"title": "cost"},
            "xaxis": {"type": "category"},
        }
    )
    for name in sorted(by_team, key=lambda n: (n == PLATFORM_COST_CENTER, n)):
        figure.add_bar(
            name=name,
            x=[f"{m:%Y-%m}" for m in months],
            y=[float(by_team[name].get(m, 0)) for m in months],
        )
    return _figure_json(figure)


def _burn_down(period, teams, now) -> dict:
    start, end = month_bounds(period.month)
    figure = go.Figure(layout={**LAYOUT, "yaxis": {"title": "cumulative cost"}})
    for index, team in enumerate(teams[: len(PALETTE)]):
        colour = PALETTE[index]
        running, xs, ys = Decimal(0), [], []
        for day, total in selectors.daily_spend(team=team, period=period):
            running += total
            xs.append(day.isoformat())
            ys.append(float(running))
        if not xs:
            continue
        figure.add_scatter(x=xs, y=ys, mode="lines+markers", name=f"{team.slug} spent",
                           line={"color": colour})  # fmt: skip
        state = selectors.burn_down(team=team, period=period, now=now)
        if now < end:
            figure.add_scatter(
                x=[xs[-1], (end - timedelta(days=1)).date().isoformat()],
                y=[ys[-1], float(state["projected"])],
                mode="lines",
                name=f"{team.slug} projected",
                line={"color": colour, "dash": "dot"},
            )
        if state["budget"] is not None:
            figure.add_scatter(
                x=[start.date().isoformat(), (end - timedelta(days=1)).date().isoformat()],
                y=[float(state["budget"])] * 2,
                mode="lines",
                name=f"{team.slug} budget",
                line={"color": colour, "dash": "dash", "width": 1},
            )
    return _figure_json(figure)


def _by_model(period, team_ids, include_platform) -> dict:
    entries = _scoped(LedgerEntry.objects.filter(period=period), team_ids, include_platform)
    rows = (
        entries.exclude(gpu_model__isnull=True)
        .values("gpu_model__name")
        .annotate(total=Sum("cost"))
        .order_by("gpu_model__name")
    )
    figure = go.Figure(layout={**LAYOUT, "yaxis": {"title": "cost"}})
    figure.add_bar(x=[r["gpu_model__name"] for r in rows], y=[float(r["total"]) for r in rows],
                   marker_color=PALETTE[0], name="cost")  # fmt: skip
    return _figure_json(figure)


def _over_quota(totals) -> dict:
    teams = [t for t in totals if t["team_id"] is not None]
    figure = go.Figure(layout={**LAYOUT, "barmode": "stack", "yaxis": {"title": "cost"}})
    names = [t["sub_account"] for t in teams]
    figure.add_bar(name="within guarantee", x=names,
                   y=[float(t["cost"] - t["over_quota_cost"]) for t in teams])  # fmt: skip
    figure.add_bar(name="over quota", x=names, y=[float(t["over_quota_cost"]) for t in teams])
    return _figure_json(figure)
