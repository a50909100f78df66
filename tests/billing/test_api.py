"""Billing API: rate cards, budgets, periods, adjustments, usage and chargeback; the bad cases."""

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.billing.metering import meter_interval
from apps.billing.models import Adjustment, BillingPeriod, Budget, LedgerEntry, RateCard
from tests.billing.conftest import AFTER_NOV, DEC, NOV
from tests.billing.test_metering import book
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

NEXT_YEAR = datetime(timezone.now().year + 1, 1, 1, tzinfo=UTC)


def test_finance_adds_a_rate_card_and_it_is_audited(finance_user, h100):
    response = client_for(finance_user).post(
        "/api/v1/rate-cards/",
        {"gpu_model": h100.name, "price_per_gpu_hour": "2.75", "effective_from": NEXT_YEAR},
        format="json",
    )
    assert response.status_code == 201, response.data
    assert response.data["currency"] == "USD"
    assert AuditEvent.objects.filter(action="rate_card.create").count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"price_per_gpu_hour": "-1"}, "price_per_gpu_hour"),
        ({"price_per_gpu_hour": "abc"}, "price_per_gpu_hour"),
        ({"over_quota_multiplier": "-0.5"}, "over_quota_multiplier"),
        ({"currency": "dollars"}, "currency"),
        ({"effective_from": "yesterday"}, "effective_from"),
    ],
)
def test_bad_rate_cards_get_400_with_the_field(finance_user, h100, body, field):
    data = {"gpu_model": h100.name, "price_per_gpu_hour": "2.0", "effective_from": NEXT_YEAR}
    response = client_for(finance_user).post("/api/v1/rate-cards/", data | body, format="json")
    assert response.status_code == 400
    assert field in response.data or field in str(response.data)
    assert not RateCard.objects.exists()


def test_overlapping_rate_cards_are_refused(finance_user, h100):
    client = client_for(finance_user)
    first = {"gpu_model": h100.name, "price_per_gpu_hour": "2", "effective_from": NEXT_YEAR}
    assert client.post("/api/v1/rate-cards/", first, format="json").status_code == 201
    later = first | {"effective_from": NEXT_YEAR + timedelta(days=40)}
    response = client.post("/api/v1/rate-cards/", later, format="json")
    assert response.status_code == 400
    assert "Overlaps" in str(response.data)
    assert RateCard.objects.count() == 1


def test_already_charged_time_keeps_its_price(finance_user, team, member, fleet, rates):
    meter_interval(start=NOV, end=NOV + timedelta(days=1), now=AFTER_NOV)
    response = client_for(finance_user).patch(
        f"/api/v1/rate-cards/{rates['h100'].pk}/", {"price_per_gpu_hour": "9.99"}, format="json"
    )
    assert response.status_code == 400
    assert "already charged" in str(response.data)
    rates["h100"].refresh_from_db()
    assert rates["h100"].price_per_gpu_hour == Decimal("2.5000")
    # Ending it in the future is fine.
    end = timezone.now() + timedelta(days=3)
    response = client_for(finance_user).patch(
        f"/api/v1/rate-cards/{rates['h100'].pk}/", {"effective_to": end}, format="json"
    )
    assert response.status_code == 200, response.data


def test_members_read_prices_but_cannot_change_them(member, rates, h100):
    client = client_for(member)
    assert client.get("/api/v1/rate-cards/").data["count"] == 2
    response = client.post(
        "/api/v1/rate-cards/",
        {"gpu_model": h100.name, "price_per_gpu_hour": "1", "effective_from": NEXT_YEAR},
        format="json",
    )
    assert response.status_code == 403


def test_budget_set_list_and_bad_values(finance_user, member, outsider, team, other_team):
    client = client_for(finance_user)
    period = f"{timezone.now():%Y-%m}"
    body = {"team": team.slug, "period": period, "amount": "1000.00", "enforcement": "block"}
    assert client.post("/api/v1/budgets/", body, format="json").status_code == 201
    assert (
        client.post("/api/v1/budgets/", body | {"amount": "-5"}, format="json").status_code == 400
    )
    assert (
        client.post("/api/v1/budgets/", body | {"period": "2026-13"}, format="json").status_code
        == 400
    )
    assert (
        client.post("/api/v1/budgets/", body | {"period": "2999-01"}, format="json").status_code
        == 400
    )
    assert Budget.objects.get().amount == Decimal("1000.00")
    mine = client_for(member).get("/api/v1/budgets/").json()["results"]
    assert [b["team"] for b in mine] == [team.slug]
    assert mine[0]["burn_down"]["budget"] == "1000.00"
    assert client_for(outsider).get("/api/v1/budgets/").data["results"] == []
    assert client_for(member).post("/api/v1/budgets/", body, format="json").status_code == 403


def test_chargeback_is_for_finance_only(member, team_admin, finance_user, platform_admin):
    for user in (member, team_admin):
        response = client_for(user).get("/api/v1/chargeback/?period=2026-11")
        assert response.status_code == 403
    for user in (finance_user, platform_admin):
        assert client_for(user).get("/api/v1/chargeback/?period=2026-11").status_code == 200


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("period=2026-1", "invalid_period"),
        ("period=november", "invalid_period"),
        ("period=2026-00", "invalid_period"),
        ("", "invalid_period"),
        ("period=2999-01", "future_period"),
        ("period=2026-11&format=pdf", "invalid_format"),
        ("period=2026-11&level=everything", "invalid_level"),
    ],
)
def test_chargeback_bad_parameters(finance_user, query, code):
    response = client_for(finance_user).get(f"/api/v1/chargeback/?{query}")
    assert response.status_code == 400
    assert response.json()["code"] == code


def test_closing_a_period_freezes_it(finance_user, team, member, fleet, rates):
    period = BillingPeriod.objects.create(month=NOV.date())
    gpu = fleet[0].gpus.first()
    book(team, member, [gpu], NOV + timedelta(days=2), NOV + timedelta(days=2, hours=3))
    client = client_for(finance_user)
    response = client.post(f"/api/v1/billing-periods/{period.pk}/close/")
    assert response.status_code == 200, response.data
    assert response.data["status"] == "closed"
    assert LedgerEntry.objects.filter(period=period).count() > 0  # metered before closing
    assert client.post(f"/api/v1/billing-periods/{period.pk}/close/").status_code == 409
    assert AuditEvent.objects.filter(action="billing_period.close").count() == 1
    before = LedgerEntry.objects.count()
    again = meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    assert again.inserted == 0 and again.skipped_closed > 0
    assert LedgerEntry.objects.count() == before


def test_the_current_month_cannot_be_closed(finance_user):
    period = BillingPeriod.objects.create(month=timezone.now().date().replace(day=1))
    response = client_for(finance_user).post(f"/api/v1/billing-periods/{period.pk}/close/")
    assert response.status_code == 409
    assert response.json()["code"] == "period_not_over"


def test_adjustments_go_to_the_open_period_and_the_ledger(finance_user, member, team):
    client = client_for(finance_user)
    body = {"team": team.slug, "amount": "-12.34", "reason": "Node outage credit"}
    response = client.post("/api/v1/adjustments/", body, format="json")
    assert response.status_code == 201, response.data
    entry = LedgerEntry.objects.get(source="adjustment")
    assert entry.cost == Decimal("-12.34") and entry.team == team
    assert (
        client.post("/api/v1/adjustments/", body | {"reason": " "}, format="json").status_code
        == 400
    )
    assert (
        client.post("/api/v1/adjustments/", body | {"amount": "0"}, format="json").status_code
        == 400
    )
    assert client_for(member).post("/api/v1/adjustments/", body, format="json").status_code == 403


def test_usage_shows_members_only_their_teams(member, outsider, finance_user, team, fleet, rates):
    gpu = fleet[0].gpus.first()
    book(team, member, [gpu], NOV + timedelta(days=1), NOV + timedelta(days=1, hours=10))
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    mine = client_for(member).get("/api/v1/usage/?period=2026-11").json()["teams"]
    assert [row["team"] for row in mine] == [team.slug]
    assert Decimal(mine[0]["cost"]) == Decimal("25.00")
    assert client_for(outsider).get("/api/v1/usage/?period=2026-11").json()["teams"] == []
    assert (
        client_for(outsider).get(f"/api/v1/usage/?period=2026-11&team={team.slug}").status_code
        == 404
    )
    everyone = client_for(finance_user).get("/api/v1/usage/?period=2026-11").json()["teams"]
    assert {row["team"] for row in everyone} == {team.slug, "platform"}


def test_csv_export_streams_and_marks_drafts(finance_user, team, member, fleet, rates):
    book(
        team,
        member,
        [fleet[0].gpus.first()],
        NOV + timedelta(days=1),
        NOV + timedelta(days=1, hours=2),
    )
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    response = client_for(finance_user).get("/api/v1/chargeback/?period=2026-11&format=csv")
    assert response.streaming
    assert response["X-Chargeback-Draft"] == "true"
    assert "draft" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {row["draft"] for row in rows} == {"true"}
    assert sum(Decimal(r["cost"]) for r in rows if r["team"] == team.slug) == Decimal("5.00")


def test_adjustment_with_a_period_or_unknown_field_is_refused_not_rebooked(finance_user, team):
    client = client_for(finance_user)
    body = {"team": team.slug, "amount": "-5.00", "reason": "Credit for October"}
    response = client.post("/api/v1/adjustments/", body | {"period": "2026-10"}, format="json")
    assert response.status_code == 400
    error = response.json()
    assert error["code"] == "invalid"
    assert "corrects_period" in error["detail"]["period"][0]
    typo = client.post("/api/v1/adjustments/", body | {"ammount": "1.00"}, format="json")
    assert typo.status_code == 400 and "ammount" in typo.json()["detail"]
    # Several faults are reported together.
    both = client.post(
        "/api/v1/adjustments/", body | {"amount": "x", "created_by": "fran"}, format="json"
    )
    assert set(both.json()["detail"]) == {"amount", "created_by"}
    assert not Adjustment.objects.exists() and not LedgerEntry.objects.exists()


def test_billing_writes_refuse_read_only_fields(finance_user, team, h100):
    client = client_for(finance_user)
    card = {
        "gpu_model": h100.name, "price_per_gpu_hour": "2.00",
        "effective_from": "2026-01-01T00:00:00Z", "created_at": "2020-01-01T00:00:00Z",
    }  # fmt: skip
    response = client.post("/api/v1/rate-cards/", card, format="json")
    assert response.status_code == 400 and "created_at" in response.json()["detail"]
    budget = {"team": team.slug, "period": "2026-11", "amount": "10", "alerts": []}
    response = client.post("/api/v1/budgets/", budget, format="json")
    assert response.status_code == 400 and "alerts" in response.json()["detail"]
