"""A team admin reads the team's cost by member on the team page, and finance the month-over-
month change on the chargeback page; the figures a person sees add up to the team totals."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.billing import exports
from apps.billing.models import BillingPeriod
from apps.billing.selectors import change_percent
from apps.dashboards.demo import seed_billing_demo

pytestmark = pytest.mark.browser


def amount(text: str) -> Decimal:
    return Decimal(text.split()[0].replace(",", ""))


@pytest.fixture
def months():
    seed_billing_demo()
    this_month = timezone.now().replace(day=1)
    last_month = this_month - timedelta(days=1)
    return f"{last_month:%Y-%m}", f"{this_month:%Y-%m}"


def team_total(month: str, slug: str) -> Decimal:
    period = BillingPeriod.objects.get(month=f"{month}-01")
    return next(t["cost"] for t in exports.team_totals(period) if t["sub_account"] == slug)


def test_a_team_admin_sees_cost_by_member_adding_up_to_the_team_total(login_as, months):
    last_month, _ = months
    page = login_as("bob")  # admin of nlp
    page.goto(f"/teams/nlp/?cost_period={last_month}")
    section = page.get_by_test_id("member-costs")
    expect(section).to_contain_text(f"Cost by member, {last_month}")
    members = [amount(t) for t in section.get_by_test_id("member-cost").all_inner_texts()]
    assert members and all(cost > 0 for cost in members)
    adjustments = amount(section.get_by_test_id("member-costs-adjustments").inner_text())
    total = amount(section.get_by_test_id("member-costs-total").inner_text())
    assert sum(members) + adjustments == total == team_total(last_month, "nlp")
    with page.expect_download() as info:
        section.get_by_test_id("member-costs-csv").click()
    text = open(info.value.path()).read()  # noqa: SIM115 - a temp file Playwright owns
    rows = {row["member"]: Decimal(row["cost"]) for row in csv.DictReader(io.StringIO(text))}
    assert rows["(team total)"] == total and rows["(team adjustments)"] == adjustments


def test_finance_sees_each_teams_change_from_the_month_before(login_as, months):
    last_month, this_month = months
    page = login_as("fran")
    page.goto(f"/billing/?period={this_month}")
    table = page.get_by_test_id("chargeback-summary")
    expect(table).to_contain_text(f"{last_month} (USD)")
    row = table.locator("tr[data-team='nlp']")
    now, before = team_total(this_month, "nlp"), team_total(last_month, "nlp")
    assert amount(row.get_by_test_id("team-cost").inner_text()) == now
    assert amount(row.get_by_test_id("previous-cost").inner_text()) == before
    assert amount(row.get_by_test_id("change").inner_text()) == now - before
    expect(row.get_by_test_id("change-percent")).to_have_text(
        f"{change_percent(now, before):,.1f} %"
    )
