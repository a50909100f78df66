"""Cost dashboard figures: budgets must not flatten the spend lines (their own panel and axis),
every money axis names the currency, and days are the reader's."""

from decimal import Decimal

import pytest

from apps.billing.figures import cost_figures
from apps.billing.models import Budget
from apps.billing.selectors import daily_spend
from portal.timezones import in_zone
from tests.billing.conftest import AFTER_NOV

pytestmark = pytest.mark.django_db


@pytest.fixture
def november_with_budget(november, team):
    """November (vision: 15.00) against a 5,000.00 budget."""
    Budget.objects.create(team=team, period=november, amount=Decimal("5000"))
    return november


def _traces(figure):
    return {t["name"]: t for t in figure["data"]}


def test_budget_has_its_own_panel_and_the_spend_keeps_its_scale(november_with_budget, team):
    figures = cost_figures(
        period=november_with_budget, teams=[team], include_platform=False, now=AFTER_NOV
    )["figures"]
    burn = figures["burn-down"]
    traces = _traces(burn)
    spent = traces["vision spent"]
    assert spent.get("yaxis", "y") == "y"
    assert spent["y"][-1] == pytest.approx(15.0)
    # Nothing drawn on the money axis comes near the 5,000 budget: the spend line is not flat.
    on_money_axis = [t for t in burn["data"] if t.get("yaxis", "y") == "y"]
    assert max(max(t["y"]) for t in on_money_axis) == pytest.approx(15.0)
    # The budget is read on its own axis, as the share used: 15 / 5000 = 0.3 %.
    share = traces["vision spent, % of budget"]
    assert share["yaxis"] == "y2"
    assert share["y"][-1] == pytest.approx(0.3)
    layout = burn["layout"]
    assert layout["yaxis"]["title"]["text"] == "Cumulative cost (USD)"
    assert layout["yaxis2"]["title"]["text"] == "Budget used (%)"
    alert_lines = sorted(s["y0"] for s in layout["shapes"] if s["yref"] == "y2")
    assert alert_lines == [50, 80, 100]


def test_without_a_budget_the_panel_says_so(november_with_budget, team):
    Budget.objects.all().delete()
    burn = cost_figures(
        period=november_with_budget, teams=[team], include_platform=False, now=AFTER_NOV
    )["figures"]["burn-down"]
    assert all(t.get("yaxis", "y") == "y" for t in burn["data"])
    assert [a["text"] for a in burn["layout"]["annotations"]] == ["No budget set for this month"]


def test_money_axes_name_the_currency(november_with_budget, team):
    figures = cost_figures(
        period=november_with_budget, teams=[team], include_platform=False, now=AFTER_NOV
    )["figures"]
    for name in ("cost-by-month", "by-model", "over-quota"):
        assert figures[name]["layout"]["yaxis"]["title"]["text"] == "Cost (USD)", name


def test_burn_down_reads_dates_under_the_spend_panel_too(november_with_budget, team):
    Budget.objects.all().delete()
    burn = cost_figures(
        period=november_with_budget, teams=[team], include_platform=False, now=AFTER_NOV
    )["figures"]["burn-down"]
    top = burn["layout"]["xaxis"]
    # Without a budget the lower panel is empty; the spend panel still names its days.
    assert top.get("showticklabels", True) is True
    assert top["type"] == "date"
    assert top["tickformat"] == "%b %-d"


def test_burn_down_days_are_the_readers(november, team):
    # The booking ran Nov 5 00:00-06:00 UTC: Nov 4 19:00 to Nov 5 01:00 in New York.
    with in_zone("America/New_York"):
        days = [
            (day.isoformat(), total)
            for day, total in daily_spend(team_ids=[team.pk], period=november)
        ]
    assert days == [("2026-11-04", Decimal("12.50")), ("2026-11-05", Decimal("2.50"))]
    days = [
        (day.isoformat(), total) for day, total in daily_spend(team_ids=[team.pk], period=november)
    ]
    assert days == [("2026-11-05", Decimal("15.00"))]


def test_burn_down_axis_is_the_readers_days(november_with_budget, team):
    with in_zone("America/New_York"):
        burn = cost_figures(
            period=november_with_budget, teams=[team], include_platform=False, now=AFTER_NOV
        )["figures"]["burn-down"]
    layout = burn["layout"]
    assert layout["xaxis2"]["title"]["text"] == "Day (America/New_York)"
    # November in UTC starts on Oct 31 at 20:00 in New York.
    assert layout["xaxis2"]["range"] == ["2026-10-31", "2026-11-30"]
    assert _traces(burn)["vision spent"]["x"][0] == "2026-11-04"
