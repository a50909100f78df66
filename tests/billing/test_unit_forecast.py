"""A unit's budget gets the forecast alert a team's gets: when all the teams below the unit
together are on course to pass it, once per month, mailed to the unit's admins."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.core import mail

from apps.billing.forecast import budget_forecast, forecast
from apps.billing.models import BillingPeriod, Budget, BudgetAlert
from apps.billing.services import budget_alerts_check
from apps.billing.services.budgets import budget_alerts_check_all
from apps.billing.units import unit_budget_rows
from apps.teams.models import OrgUnit, UnitMembership
from tests.billing.test_forecast import DEC, NOW, charge_days
from tests.conftest import client_for
from tests.factories import TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def december():
    return BillingPeriod.objects.create(month=DEC.date())


@pytest.fixture
def research(team, other_team, team_admin):
    """organisation > research (vision, nlp; admin rhea) and ops (infra)."""
    root = OrgUnit.objects.get_or_create(slug="organisation", defaults={"name": "Organisation"})[0]
    research = OrgUnit.objects.create(slug="research", name="Research", parent=root)
    ops = OrgUnit.objects.create(slug="ops", name="Ops", parent=root)
    team.unit = other_team.unit = research
    team.save()
    other_team.save()
    UnitMembership.objects.create(user=UserFactory(username="rhea"), unit=research)
    UnitMembership.objects.create(user=UserFactory(username="otto"), unit=ops)
    return {"research": research, "infra": TeamFactory(slug="infra", unit=ops)}


def test_a_unit_on_course_to_pass_its_budget_is_alerted_once(
    team, other_team, research, december, django_capture_on_commit_callbacks
):
    # vision and nlp 50.00 a day each (100.00 together) on Dec 1..9; infra, in another unit,
    # 500.00 a day, which the research budget does not cover.
    charge_days(team, december, ["50.00"] * 9, first=DEC)
    charge_days(other_team, december, ["50.00"] * 9, first=DEC)
    charge_days(research["infra"], december, ["500.00"] * 9, first=DEC)
    budget = Budget.objects.create(unit=research["research"], period=december, amount=Decimal(2000))
    outlook = budget_forecast(budget, now=NOW)
    assert (outlook.spent, outlook.run_rate) == (Decimal("900.00"), Decimal("100.00"))
    # 900 + 11 days x 100 = 2000 on Dec 20; Dec 21 passes it (as one team at 100 a day would)
    assert outlook.exceeds_on == date(2026, 12, 21)
    assert forecast(team=team, period=december, now=NOW).run_rate == Decimal("50.00")
    with django_capture_on_commit_callbacks(execute=True):
        created = budget_alerts_check(budget=budget, now=NOW)
    assert [(a.kind, str(a.exceeds_on), a.spent) for a in created] == [
        ("forecast", "2026-12-21", Decimal("900.00"))
    ]
    message = "At this rate unit Organisation / Research exceeds its budget on Dec 21."
    assert created[0].message == message
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["rhea@example.com"]  # the unit's admins, not ops' nor teams'
    assert mail.outbox[0].subject == f"[GPU portal] {message}"
    assert "Unit Organisation / Research (all its teams together) has been charged 900.00" in (
        mail.outbox[0].body
    )
    # rerun: the same hour, a day later, and the hourly sweep over every budget send nothing
    with django_capture_on_commit_callbacks(execute=True):
        assert budget_alerts_check(budget=budget, now=NOW) == []
        assert budget_alerts_check(budget=budget, now=NOW + timedelta(days=1)) == []
        budget_alerts_check_all(periods=[december])
    assert len(mail.outbox) == 1
    assert BudgetAlert.objects.filter(budget=budget, kind="forecast").count() == 1


def test_a_unit_within_its_pace_gets_no_forecast_alert(team, other_team, research, december):
    charge_days(team, december, ["10.00"] * 9, first=DEC)
    charge_days(research["infra"], december, ["500.00"] * 9, first=DEC)
    budget = Budget.objects.create(unit=research["research"], period=december, amount=Decimal(2000))
    assert budget_alerts_check(budget=budget, now=NOW) == []
    assert budget_forecast(budget, now=NOW).message == (
        "At this rate unit Organisation / Research stays within its 2026-12 budget."
    )
    assert not mail.outbox


def test_the_budgets_page_and_api_show_a_units_forecast(
    client, team, other_team, research, december, finance_user
):
    charge_days(team, december, ["100.00"] * 9, first=DEC)
    budget = Budget.objects.create(unit=research["research"], period=december, amount=Decimal(2000))
    budget_alerts_check(budget=budget, now=NOW)
    client.force_login(finance_user)
    page = client.get("/billing/budgets/?period=2026-12").content.decode()
    row = page[page.index('<tr data-unit="research"') :]
    row = row[: row.index("</tr>")]
    assert "forecast over on Dec 21" in row
    # the page and the API read today's forecast; as of NOW it ends at 900 + 22 days x 100
    assert '<td data-col="forecast">' in row
    (state,) = unit_budget_rows(user=finance_user, period=december, now=NOW)
    assert (state["projected"], state["exceeds_on"]) == (Decimal("3100.00"), date(2026, 12, 21))
    assert (
        state["message"]
        == "At this rate unit Organisation / Research exceeds its budget on Dec 21."
    )
    burn_down = client_for(finance_user).get(f"/api/v1/budgets/{budget.pk}/").json()["burn_down"]
    assert Decimal(burn_down["projected"]) >= Decimal(burn_down["spent"]) == Decimal("900.00")
