"""Unit budgets: a unit's budget covers every team below it; its alerts mail the unit's admins;
in block mode any budget on a team's path (its own, its unit's, an ancestor's) refuses a
booking it cannot pay for, naming which; who may set and see them."""

from decimal import Decimal

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.billing.choices import Enforcement
from apps.billing.models import BillingPeriod, Budget
from apps.billing.periods import month_start
from apps.billing.services import adjustment_create, budget_alerts_check, budget_set
from apps.reservations.models import Reservation
from apps.teams.models import OrgUnit, UnitMembership
from tests.conftest import client_for
from tests.factories import TeamFactory, UserFactory
from tests.reservations.conftest import booking

pytestmark = pytest.mark.django_db


@pytest.fixture
def org(team, other_team):
    """organisation > research > vision, nlp; organisation > ops > infra."""
    root = OrgUnit.objects.get_or_create(slug="organisation", defaults={"name": "Organisation"})[0]
    research = OrgUnit.objects.create(slug="research", name="Research", parent=root)
    ops = OrgUnit.objects.create(slug="ops", name="Ops", parent=root)
    team.unit, other_team.unit = research, research
    team.save()
    other_team.save()
    infra = TeamFactory(slug="infra", unit=ops)
    return {"root": root, "research": research, "ops": ops, "infra": infra}


@pytest.fixture
def unit_admin(org):
    user = UserFactory(username="rhea")
    UnitMembership.objects.create(user=user, unit=org["research"])
    return user


def _period(start):
    return BillingPeriod.objects.get_or_create(month=month_start(start))[0]


def _charge(team, period, amount, actor):
    adjustment_create(actor=actor, team=team, amount=Decimal(amount), reason="usage", period=period)


def test_unit_block_budget_refuses_a_team_below_it_and_names_the_unit(
    member, quotas, finance_user, team, other_team, org, rates, tomorrow_9
):
    period = _period(tomorrow_9)
    budget_set(actor=finance_user, team=team, period=period, amount=Decimal("1000"),
               enforcement=Enforcement.BLOCK)  # fmt: skip
    budget_set(actor=finance_user, unit=org["research"], period=period, amount=Decimal("30"),
               enforcement=Enforcement.BLOCK)  # fmt: skip
    _charge(other_team, period, "25", finance_user)  # nlp spends the unit down to 5.00
    response = client_for(member).post(
        "/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json"
    )
    assert response.status_code == 403, response.content
    body = response.json()
    assert body["code"] == "budget_exhausted"
    assert body["detail"]["budget_unit"] == "research" and body["detail"]["budget_team"] is None
    assert body["detail"]["left"] == "5.00" and body["detail"]["booking_cost"] == "10.00"
    assert "unit Organisation / Research's 30.00 USD budget" in body["message"]
    assert not Reservation.objects.exists()


def test_an_ancestor_units_block_budget_refuses_too(
    member, quotas, finance_user, team, org, rates, tomorrow_9
):
    period = _period(tomorrow_9)
    budget_set(actor=finance_user, unit=org["research"], period=period, amount=Decimal("100"),
               enforcement=Enforcement.BLOCK)  # fmt: skip
    budget_set(actor=finance_user, unit=org["root"], period=period, amount=Decimal("20"),
               enforcement=Enforcement.BLOCK)  # fmt: skip
    _charge(org["infra"], period, "12", finance_user)  # a team in another unit spends the root's
    response = client_for(member).post(
        "/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json"
    )
    assert response.status_code == 403, response.content
    assert response.json()["detail"]["budget_unit"] == "organisation"
    assert response.json()["detail"]["left"] == "8.00"


def test_a_team_budget_is_checked_before_its_units(
    member, quotas, finance_user, team, org, rates, tomorrow_9
):
    period = _period(tomorrow_9)
    budget_set(actor=finance_user, team=team, period=period, amount=Decimal("3"),
               enforcement=Enforcement.BLOCK)  # fmt: skip
    budget_set(actor=finance_user, unit=org["research"], period=period, amount=Decimal("0"),
               enforcement=Enforcement.BLOCK)  # fmt: skip
    response = client_for(member).post(
        "/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json"
    )
    assert response.json()["detail"]["budget_team"] == "vision"
    assert "vision's 3.00 USD budget" in response.json()["message"]


def test_booking_that_fits_every_budget_on_the_path_is_made(
    member, quotas, finance_user, team, other_team, org, rates, tomorrow_9
):
    period = _period(tomorrow_9)
    budget_set(actor=finance_user, unit=org["research"], period=period, amount=Decimal("35"),
               enforcement=Enforcement.BLOCK)  # fmt: skip
    budget_set(
        actor=finance_user,
        unit=org["ops"],
        period=period,
        amount=Decimal("0"),
        enforcement=Enforcement.BLOCK,
    )  # another unit's budget does not apply
    budget_set(
        actor=finance_user,
        unit=org["root"],
        period=period,
        amount=Decimal("0"),
        enforcement=Enforcement.ALERT,
    )  # alert mode never refuses
    _charge(other_team, period, "25", finance_user)  # exactly 10.00 left
    response = client_for(member).post(
        "/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json"
    )
    assert response.status_code == 201, response.content


def test_unit_budget_alerts_count_all_its_teams_and_mail_the_unit_admins(
    team, other_team, org, unit_admin, team_admin, finance_user,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    period = _period(timezone.now())
    budget = budget_set(actor=finance_user, unit=org["research"], period=period,
                        amount=Decimal("100"))  # fmt: skip
    _charge(team, period, "30", finance_user)
    _charge(other_team, period, "25", finance_user)
    _charge(org["infra"], period, "500", finance_user)  # outside the unit: not counted
    with django_capture_on_commit_callbacks(execute=True):
        alerts = budget_alerts_check(budget=budget)
    assert [(a.threshold, a.spent) for a in alerts] == [(50, Decimal("55.00"))]
    assert len(mail.outbox) == 1 and mail.outbox[0].to == [unit_admin.email]
    assert "research has used 50 %" in mail.outbox[0].subject
    assert "Unit Organisation / Research" in mail.outbox[0].body


def test_a_budget_needs_exactly_one_owner(finance_user, team, org):
    period = _period(timezone.now())
    with pytest.raises(ValidationError):
        budget_set(actor=finance_user, team=team, unit=org["research"], period=period,
                   amount=Decimal("1"))  # fmt: skip
    with pytest.raises(ValidationError):
        budget_set(actor=finance_user, period=period, amount=Decimal("1"))
    with pytest.raises(IntegrityError), transaction.atomic():
        Budget.objects.create(period=period, amount=Decimal("1"))
    assert not Budget.objects.exists()


def test_finance_sets_a_unit_budget_through_the_api(finance_user, org):
    response = client_for(finance_user).post(
        "/api/v1/budgets/",
        {"unit": "research", "period": f"{timezone.now():%Y-%m}", "amount": "50",
         "enforcement": "block"},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["unit"] == "research" and body["team"] is None
    assert body["burn_down"]["left"] == "50.00" and body["burn_down"]["teams"] == 2
    both = client_for(finance_user).post(
        "/api/v1/budgets/",
        {"unit": "research", "team": "vision", "period": f"{timezone.now():%Y-%m}",
         "amount": "5"},
        format="json",
    )  # fmt: skip
    assert both.status_code == 400 and "team" in both.json()["detail"]
    assert Budget.objects.count() == 1


def test_unit_admins_see_budgets_below_their_unit_and_nothing_outside(
    finance_user, team, org, unit_admin, member
):
    period = _period(timezone.now())
    budget_set(actor=finance_user, unit=org["research"], period=period, amount=Decimal("50"))
    budget_set(actor=finance_user, unit=org["ops"], period=period, amount=Decimal("60"))
    budget_set(actor=finance_user, team=team, period=period, amount=Decimal("20"))
    budget_set(actor=finance_user, team=org["infra"], period=period, amount=Decimal("30"))
    seen = client_for(unit_admin).get("/api/v1/budgets/").json()["results"]
    assert sorted(b["unit"] or b["team"] for b in seen) == ["research", "vision"]
    # A team member sees their team's budget, not the unit's (that would show others' spend).
    seen = client_for(member).get("/api/v1/budgets/").json()["results"]
    assert [b["unit"] or b["team"] for b in seen] == ["vision"]
    # Setting budgets stays with finance and platform admins.
    response = client_for(unit_admin).post(
        "/api/v1/budgets/",
        {"unit": "research", "period": f"{period.month:%Y-%m}", "amount": "999"},
        format="json",
    )
    assert response.status_code == 403
    assert Budget.objects.get(unit=org["research"]).amount == Decimal("50")


def test_budgets_page_lists_unit_budgets_and_sets_one(client, finance_user, team, org):
    period = _period(timezone.now())
    _charge(team, period, "12.50", finance_user)
    client.force_login(finance_user)
    response = client.post(
        f"/billing/budgets/?period={period.month:%Y-%m}",
        {"unit": "research", "amount": "40", "enforcement": "alert"},
    )
    assert response.status_code == 302, response.content
    page = client.get(f"/billing/budgets/?period={period.month:%Y-%m}").content.decode()
    assert 'data-testid="unit-budgets"' in page and "Organisation / Research" in page
    assert "27.50" in page  # 40 - 12.50 left
    refused = client.post(
        f"/billing/budgets/?period={period.month:%Y-%m}",
        {"unit": "research", "team": "vision", "amount": "40", "enforcement": "alert"},
    )
    assert "Choose either a team or a unit." in refused.content.decode()
