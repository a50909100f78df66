"""Finance groups the cost dashboard by unit: one row per charged department whose cost is its
teams' to the cent, and the platform's idle capacity on its own row; a unit admin's rows hold only
the teams below their unit."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.dashboards.demo import seed_billing_demo


@pytest.fixture
def last_month():
    seed_billing_demo()
    first_of_month = timezone.now().replace(day=1)
    return f"{first_of_month - timedelta(days=1):%Y-%m}"


def _costs(page) -> dict[str, Decimal]:
    rows = page.get_by_test_id("cost-rows").locator("tbody tr")
    return {
        row.get_attribute("data-row"): Decimal(
            row.get_by_test_id("row-cost").inner_text().replace(",", "")
        )
        for row in rows.all()
    }


def test_finance_groups_the_cost_dashboard_by_unit(login_as, last_month):
    page = login_as("fran")
    page.goto(f"/billing/cost/?period={last_month}")
    by_team = _costs(page)
    assert set(by_team) == {"vision", "nlp", "platform"}  # the demo charges research's teams

    page.get_by_label("Group by").select_option("unit")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", name="Cost by unit")).to_be_visible()
    by_unit = _costs(page)
    assert by_unit["Research"] == by_team["vision"] + by_team["nlp"]
    assert set(by_unit) == {"Research", "platform"}  # engineering's teams were not charged
    assert by_unit["platform"] == by_team["platform"]
    assert sum(by_unit.values()) == sum(by_team.values())
    research = page.locator("[data-testid='cost-rows'] tr[data-row='Research']")
    expect(research).to_contain_text("nlp, vision")

    page.get_by_label("Unit", exact=True).select_option("research")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_test_id("cost-rows").locator("tbody tr")).to_have_count(1)
    assert _costs(page) == {"Research": by_unit["Research"]}


def test_a_unit_admin_sees_their_department_only(login_as, last_month):
    page = login_as("rita")  # admin of research
    page.goto(f"/billing/cost/?period={last_month}&group=unit")
    rows = page.get_by_test_id("cost-rows").locator("tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-row", "Research")
