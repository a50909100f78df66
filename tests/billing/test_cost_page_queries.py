"""The cost dashboard reads every team's daily spend, budget, recent charges and bookings in a
few grouped queries: its query count does not grow with the teams shown, and each line it
draws carries the same numbers as the team's own reads (`selectors.daily_spend`,
`forecast.forecast`) give."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.billing.figures import cost_figures
from apps.billing.forecast import ForecastReads, forecast, teams_forecast
from apps.billing.models import BillingPeriod, Budget, LedgerEntry
from apps.billing.selectors import charged_by_team, daily_spend, daily_spend_by_team, spend_of
from tests.billing.conftest import NOV
from tests.factories import TeamFactory, UserFactory, make_booking

pytestmark = pytest.mark.django_db

# Mid-November: the month is open, so every line drawn has a forecast with bookings ahead.
NOW = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


@pytest.fixture
def month(fleet, rates, h100):
    """12 teams, each with ledger lines on the first 19 days of November at prices that leave
    fractions of a cent, a budget for every other team, and a booking ahead for the first
    four teams (one of them over quota)."""
    period = BillingPeriod.objects.get_or_create(month=NOV.date())[0]
    user = UserFactory(username="booker")
    gpus = [gpu for node in fleet[:2] for gpu in node.gpus.order_by("index")]
    teams = [TeamFactory(slug=f"team-{n:02}") for n in range(12)]
    lines = []
    for n, team in enumerate(teams):
        for day in range(19):
            for hour in (3, 14, 23):
                start = NOV + timedelta(days=day, hours=hour)
                cost = Decimal("2.3333") * (n + 1) * (hour + day) / 7
                lines.append(
                    LedgerEntry(
                        period=period, team=team, source="reservation", source_id=n + 1,
                        gpu=gpus[n], gpu_model=h100, slice_start=start,
                        slice_end=start + timedelta(hours=1), gpu_seconds=3600,
                        unit_price=Decimal("2.3333"), rate_card=rates["h100"],
                        gpu_cost=cost.quantize(Decimal("1e-10")),
                        cost=cost.quantize(Decimal("1e-10")),
                    )
                )  # fmt: skip
        if n % 2 == 0:
            Budget.objects.create(team=team, period=period, amount=Decimal(400 * (n + 1)))
        if n < 4:
            start = NOW + timedelta(days=n + 1, minutes=17)
            make_booking(team, user, gpus[n : n + 1], start, start + timedelta(hours=13),
                         over_quota_gpus=int(n == 1))  # fmt: skip
    LedgerEntry.objects.bulk_create(lines)
    return period, teams


def _queries(period, teams) -> int:
    with CaptureQueriesContext(connection) as queries:
        cost_figures(period=period, teams=teams, include_platform=False, now=NOW)
    return len(queries)


def test_the_cost_page_makes_as_many_queries_for_twelve_teams_as_for_three(month):
    period, teams = month
    assert _queries(period, teams[:3]) == _queries(period, teams)


def test_each_line_drawn_is_the_teams_own_numbers(month):
    period, teams = month
    burn = cost_figures(period=period, teams=teams, include_platform=False, now=NOW)["figures"]
    traces = {t["name"]: t for t in burn["burn-down"]["data"]}
    for team in teams[:8]:
        alone = forecast(team=team, period=period, now=NOW)
        spent = [float(v) for v in _running(daily_spend(team_ids=[team.pk], period=period))]
        assert traces[f"{team.slug} spent"]["y"] == spent
        ahead = [spent[-1]] + [float(row[1]) for row in alone.days]
        assert traces[f"{team.slug} forecast"]["y"] == ahead
    # Teams past the eight colours get no line.
    assert f"{teams[8].slug} spent" not in traces


def test_forecasts_read_together_equal_each_read_alone(month):
    period, teams = month
    ids = [team.pk for team in teams]
    reads = ForecastReads(team_ids=ids, period=period, now=NOW)
    budgets = {b.team_id: b for b in Budget.objects.filter(period=period)}
    charged = charged_by_team(period)
    for team in teams:
        together = forecast(team=team, period=period, now=NOW, budgets=budgets, reads=reads,
                            charged=charged)  # fmt: skip
        assert together == forecast(team=team, period=period, now=NOW)
    booked = [team.pk for team in teams[:4]]
    assert reads.booked(booked), "the bookings ahead are priced"
    for group in (ids[:2], ids[1:5], ids):
        alone = teams_forecast(team_ids=group, budget=None, period=period, now=NOW, unit="u")
        together = teams_forecast(team_ids=group, budget=None, period=period, now=NOW,
                                  unit="u", reads=reads)  # fmt: skip
        assert together == alone
        assert together.booked == alone.booked and together.run_rate == alone.run_rate
        by_team = daily_spend_by_team(team_ids=ids, period=period)
        assert spend_of(by_team, group) == daily_spend(team_ids=group, period=period)


def _running(days) -> list[Decimal]:
    total, out = Decimal(0), []
    for _, cost in days:
        total += cost
        out.append(total)
    return out


def test_day_sums_are_to_the_last_place(month):
    """Summing teams' day sums gives the exact sum of their lines, as one GROUP BY day does."""
    period, teams = month
    ids = [team.pk for team in teams]
    days = spend_of(daily_spend_by_team(team_ids=ids, period=period), ids)
    assert [day for day, _ in days] == [date(2026, 11, d) for d in range(1, 20)]
    exact = sum(LedgerEntry.objects.values_list("cost", flat=True), Decimal(0))
    assert sum((cost for _, cost in days), Decimal(0)) == exact


def test_the_forecasts_take_the_charges_from_the_pages_totals(month, monkeypatch):
    """The month's team totals are summed once a page: the forecasts' spend is read from the
    rows the page shows, which are each team's `charged_by_team` to the cent."""
    period, teams = month
    charged = charged_by_team(period)

    def summed_again(period):
        raise AssertionError("the month was summed a second time")

    monkeypatch.setattr("apps.billing.selectors.charged_by_team", summed_again)
    page = cost_figures(period=period, teams=teams, include_platform=False, now=NOW)
    assert {row["team_id"]: row["cost"] for row in page["totals"]} == charged
