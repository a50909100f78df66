"""Budget forecasts: the run-rate of the last days with its range, bookings as a floor per day,
the day a budget is passed, the forecast alert, and one definition of "left"."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail

from apps.billing.choices import ChargeSource, Enforcement
from apps.billing.forecast import forecast, run_rate
from apps.billing.models import BillingPeriod, Budget, BudgetAlert, LedgerEntry, RateCard
from apps.billing.services import budget_alerts_check
from apps.billing.statements import team_statement
from tests.factories import make_booking

pytestmark = pytest.mark.django_db

DEC = datetime(2026, 12, 1, tzinfo=UTC)
NOW = datetime(2026, 12, 10, tzinfo=UTC)  # midnight: Dec 10 is a whole day left


@pytest.fixture
def december():
    return BillingPeriod.objects.create(month=DEC.date())


def charge_days(team, period, costs: list[str], *, first: datetime) -> None:
    """One job charge a day from `first`, the costs given (for days before December, in
    November's period)."""
    november = BillingPeriod.objects.get_or_create(month=date(2026, 11, 1))[0]
    for index, cost in enumerate(costs):
        moment = first + timedelta(days=index, hours=3)
        LedgerEntry.objects.create(
            period=period if moment >= DEC else november, team=team, source=ChargeSource.JOB,
            source_id=index + 1, slice_start=moment, slice_end=moment + timedelta(hours=1),
            gpu_seconds=3600, gpu_cost=Decimal(cost), cost=Decimal(cost),
        )  # fmt: skip


def test_run_rate_is_the_mean_with_one_standard_deviation_either_side():
    assert run_rate([Decimal(150), Decimal(50)] * 3 + [Decimal(100)]) == (
        Decimal("100.00"), Decimal("53.71"), Decimal("146.29")
    )  # fmt: skip
    assert run_rate([Decimal(10), Decimal(300)]) == (
        Decimal("155.00"), Decimal("10.00"), Decimal("300.00")
    )  # fmt: skip
    assert run_rate([]) == (Decimal(0), Decimal(0), Decimal(0))


def test_steady_spend_exceeds_the_budget_on_a_known_day(team, december):
    charge_days(team, december, ["100.00"] * 9, first=DEC)  # Dec 1..9: 900 spent
    Budget.objects.create(team=team, period=december, amount=Decimal("2000"))
    outlook = forecast(team=team, period=december, now=NOW)
    assert outlook.spent == Decimal("900.00")
    assert (outlook.run_rate, outlook.run_rate_low, outlook.run_rate_high) == (
        Decimal("100.00"), Decimal("100.00"), Decimal("100.00")
    )  # fmt: skip
    # 900 + 11 days x 100 = 2000 on Dec 20 (not over); Dec 21 takes it to 2100.
    assert outlook.exceeds_on == date(2026, 12, 21)
    assert outlook.projected == Decimal("3100.00")  # 900 + 22 days x 100
    assert outlook.left == Decimal("1100.00")
    assert outlook.message == "At this rate vision exceeds its budget on Dec 21."


def test_variable_spend_gives_a_range_of_dates(team, december):
    # The window is the 7 days before Dec 10: Dec 3..9 = 150, 50, 150, 50, 150, 50, 150.
    charge_days(team, december, ["100.00", "100.00"] + ["150.00", "50.00"] * 3 + ["150.00"],
                first=DEC)  # fmt: skip
    Budget.objects.create(team=team, period=december, amount=Decimal("2000"))
    outlook = forecast(team=team, period=december, now=NOW)
    assert outlook.spent == Decimal("950.00")
    assert outlook.run_rate == Decimal("107.14")  # 750 / 7
    assert outlook.run_rate_low < outlook.run_rate < outlook.run_rate_high
    # 1,050 left: 10 days at the mean (1,071.40) -> Dec 19; the high rate passes sooner and
    # the low rate later.
    assert outlook.exceeds_on == date(2026, 12, 19)
    assert outlook.exceeds_on_earliest < outlook.exceeds_on < outlook.exceeds_on_latest
    assert outlook.projected_low < outlook.projected < outlook.projected_high


def test_bookings_are_a_floor_for_their_days_not_an_addition(team, member, fleet, december):
    h100 = fleet[0].gpus.first().model
    RateCard.objects.create(
        gpu_model=h100, price_per_gpu_hour=Decimal("2.50"), effective_from=DEC - timedelta(days=60)
    )
    charge_days(team, december, ["10.00"] * 9, first=DEC)  # run-rate 10 a day
    start = datetime(2026, 12, 15, 8, tzinfo=UTC)
    make_booking(team, member, list(fleet[0].gpus.all()[:8]), start, start + timedelta(hours=10))
    outlook = forecast(team=team, period=december, now=NOW)
    assert outlook.booked == Decimal("200.00")  # 8 GPUs x 10 h x 2.50
    # 22 days left: 21 at the run-rate, Dec 15 at its booking (200, more than 10).
    assert outlook.projected == Decimal("90.00") + 21 * Decimal(10) + Decimal(200)


def test_forecast_alert_says_when_the_budget_will_be_passed_once(
    team, team_admin, december, django_capture_on_commit_callbacks
):
    charge_days(team, december, ["100.00"] * 9, first=DEC)
    budget = Budget.objects.create(
        team=team, period=december, amount=Decimal("2000"), enforcement=Enforcement.ALERT
    )
    with django_capture_on_commit_callbacks(execute=True):
        created = budget_alerts_check(budget=budget, now=NOW)
    assert [(a.kind, a.exceeds_on) for a in created] == [("forecast", date(2026, 12, 21))]
    assert created[0].message == "At this rate vision exceeds its budget on Dec 21."
    assert len(mail.outbox) == 1 and mail.outbox[0].to == [team_admin.email]
    subject = mail.outbox[0].subject
    assert subject == "[GPU portal] At this rate vision exceeds its budget on Dec 21."
    assert "run-rate of 100.00 a day" in mail.outbox[0].body
    with django_capture_on_commit_callbacks(execute=True):
        assert budget_alerts_check(budget=budget, now=NOW + timedelta(days=1)) == []
    assert len(mail.outbox) == 1


def test_no_forecast_alert_when_the_pace_fits_the_budget(team, team_admin, december):
    charge_days(team, december, ["10.00"] * 9, first=DEC)
    budget = Budget.objects.create(team=team, period=december, amount=Decimal("2000"))
    assert budget_alerts_check(budget=budget, now=NOW) == []
    assert not BudgetAlert.objects.exists()
    outlook = forecast(team=team, period=december, now=NOW)
    assert outlook.message == "At this rate vision stays within its 2026-12 budget."


def test_left_is_budget_minus_spent_on_the_page_api_and_statement(client, team, member, december):
    # Three charges whose exact sum (0.015) rounds differently from their parts.
    charge_days(team, december, ["0.005", "0.005", "0.005", "33.333"], first=DEC)
    Budget.objects.create(team=team, period=december, amount=Decimal("100"))
    outlook = forecast(team=team, period=december, now=NOW)
    statement = team_statement(december, team)
    assert outlook.spent == statement.total
    assert outlook.left == statement.budget_left == Decimal("100") - outlook.spent
    assert outlook.left_after_bookings == outlook.left - outlook.booked
    client.force_login(member)
    page = client.get("/billing/budgets/?period=2026-12").content.decode()
    row = page[page.index('data-team="vision"') :]
    assert f'data-col="spent">{outlook.spent}' in row.replace(" USD", "")
    assert f'data-col="left">{outlook.left}' in row.replace(" USD", "")
