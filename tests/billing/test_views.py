"""Billing pages: who sees what, forms that refuse bad input inline, downloads linked."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.billing.models import Adjustment, Budget, RateCard

pytestmark = pytest.mark.django_db


def test_chargeback_page_shows_team_totals_and_downloads(client, finance_user, november, team):
    client.force_login(finance_user)
    page = client.get("/billing/?period=2026-11").content.decode()
    assert 'data-team="vision"' in page and "15.00" in page  # 6 h x 2.50
    assert 'data-team="platform"' in page
    for fmt in ("csv", "xlsx", "json", "focus"):
        assert f"format={fmt}" in page
    assert "draft" in page


def test_chargeback_table_names_the_currency_once_in_its_headers(
    client, finance_user, november, team
):
    client.force_login(finance_user)
    page = client.get("/billing/?period=2026-11").content.decode()
    assert '<th scope="col">Cost (USD)</th>' in page
    assert '<td data-testid="team-cost">15.00</td>' in page
    table = page[page.index('data-testid="chargeback-summary"') : page.index("</table>")]
    assert "USD</td>" not in table


def test_chargeback_page_is_finance_only(client, member, team_admin):
    for user in (member, team_admin):
        client.force_login(user)
        assert client.get("/billing/").status_code == 403


def test_bad_period_falls_back_with_a_message(client, finance_user):
    client.force_login(finance_user)
    page = client.get("/billing/?period=2026-99").content.decode()
    assert "period must be a month written YYYY-MM" in page


def test_finance_closes_a_finished_month_from_the_page(client, finance_user, november):
    client.force_login(finance_user)
    response = client.post("/billing/?period=2026-11", {"action": "close"}, follow=True)
    assert "is closed" in response.content.decode()
    november.refresh_from_db()
    assert november.is_closed
    page = client.get("/billing/?period=2026-11").content.decode()
    assert "Close period" not in page and "is closed: book corrections" in page


def test_adjustment_form_refuses_a_zero_amount_inline(client, finance_user, team):
    client.force_login(finance_user)
    page = client.post("/billing/", {"team": team.slug, "amount": "0", "reason": "x"}).content
    assert b"non-zero amount" in page
    assert not Adjustment.objects.exists()


def test_rate_card_page_adds_and_refuses_overlap(client, finance_user, member, h100):
    start = timezone.now() + timedelta(days=2)
    client.force_login(finance_user)
    data = {
        "gpu_model": h100.name, "price_per_gpu_hour": "2.10", "currency": "USD",
        "effective_from": start.strftime("%Y-%m-%d %H:%M"), "over_quota_multiplier": "1",
    }  # fmt: skip
    assert client.post("/billing/rate-cards/", data).status_code == 302
    page = client.post("/billing/rate-cards/", data).content.decode()
    assert "Overlaps" in page
    assert RateCard.objects.count() == 1
    client.force_login(member)
    assert "2.1000 USD" in client.get("/billing/rate-cards/").content.decode()
    assert client.post("/billing/rate-cards/", data).status_code == 403


def test_budget_page_sets_and_shows_burn_down(client, finance_user, member, team):
    client.force_login(finance_user)
    response = client.post(
        "/billing/budgets/", {"team": team.slug, "amount": "500", "enforcement": "block"}
    )
    assert response.status_code == 302
    assert Budget.objects.get().amount == Decimal("500.00")
    bad = client.post(
        "/billing/budgets/", {"team": team.slug, "amount": "-1", "enforcement": "alert"}
    )
    assert b"greater than or equal to 0" in bad.content
    client.force_login(member)
    page = client.get("/billing/budgets/").content.decode()
    assert 'data-team="vision"' in page and "500.00" in page and "block" in page


def test_cost_dashboard_scopes_members_to_their_teams(client, member, finance_user, november):
    client.force_login(member)
    page = client.get("/billing/cost/?period=2026-11").content.decode()
    assert 'data-testid="cost-total">15.00' in page  # only vision, no platform idle
    assert "format=csv" not in page  # no finance downloads
    client.force_login(finance_user)
    page = client.get("/billing/cost/?period=2026-11").content.decode()
    assert "format=focus" in page
    assert 'id="dashboard-figures"' in page and "vendor/plotly/plotly.min.js" in page


def test_cost_dashboard_empty_state(client, member, team):
    client.force_login(member)
    page = client.get("/billing/cost/").content.decode()
    assert 'data-testid="cost-empty"' in page
