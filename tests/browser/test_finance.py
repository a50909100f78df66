"""Flow 2: finance opens the cost dashboard, downloads the CSV, XLSX and FOCUS exports, and each
file parses and sums to the total the page shows."""

import csv
import io
import zipfile
from datetime import timedelta
from decimal import Decimal

import openpyxl
import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.dashboards.demo import seed_billing_demo


@pytest.fixture
def last_month():
    seed_billing_demo()
    first_of_month = timezone.now().replace(day=1)
    return f"{first_of_month - timedelta(days=1):%Y-%m}"


def test_finance_downloads_exports_that_sum_to_the_page_total(login_as, last_month):
    page = login_as("fran")
    page.goto(f"/billing/cost/?period={last_month}")
    total = page.get_by_test_id("cost-total")
    expect(total).to_contain_text("USD")
    page_total = Decimal(total.inner_text().split()[0].replace(",", ""))  # "28,543.00 USD"
    assert page_total > 0
    expect(page.locator("[data-figure='cost-by-month'] .main-svg").first).to_be_visible()

    def download(fmt: str) -> bytes:
        with page.expect_download() as info:
            page.locator(f"[data-testid='downloads'] a[data-format='{fmt}']").click()
        return open(info.value.path(), "rb").read()  # noqa: SIM115 - a temp file Playwright owns

    rows = list(csv.DictReader(io.StringIO(download("csv").decode())))
    assert sum(Decimal(r["cost"]) for r in rows) == page_total
    focus = list(csv.DictReader(io.StringIO(download("focus").decode())))
    assert sum(Decimal(r["BilledCost"]) for r in focus) == page_total
    assert {r["x_Draft"] for r in focus} == {"true"}  # the month is still open
    workbook = openpyxl.load_workbook(io.BytesIO(download("xlsx")))
    detail = list(workbook["Detail"].iter_rows(values_only=True))
    column = detail[0].index("cost")
    assert detail[-1][0] == "Total"  # SUM formulas under the lines
    assert sum(Decimal(str(row[column])) for row in detail[1:-1]) == page_total
    focus_12 = list(csv.DictReader(io.StringIO(download("focus-1.2").decode())))
    assert sum(Decimal(r["BilledCost"]) for r in focus_12) == page_total
    assert "AllocatedMethodId" in focus[0] and "AllocatedMethodId" not in focus_12[0]


def test_members_see_only_their_team_and_no_downloads(login_as, last_month):
    page = login_as("alice")
    page.goto(f"/billing/cost/?period={last_month}")
    expect(page.get_by_test_id("cost-total")).to_be_visible()
    expect(page.get_by_test_id("downloads")).to_have_count(0)
    options = page.locator("#team-filter option").all_inner_texts()
    assert options == ["all teams", "vision"]


def test_team_admin_prints_the_teams_statement_and_finance_zips_them_all(
    login_as, last_month, browser_errors
):
    page = login_as("bob")
    page.goto(f"/billing/budgets/?period={last_month}")
    page.locator("[data-team='nlp'] a.statement-link").click()
    expect(page.get_by_test_id("statement")).to_be_visible()
    expect(page.get_by_test_id("statement-draft")).to_contain_text("not an invoice")
    expect(page.get_by_test_id("invoice-id")).to_have_text(f"DRAFT-GPU-{last_month}-nlp")
    statement_total = page.get_by_test_id("statement-total").inner_text()
    assert statement_total.endswith(" USD")
    # a team bob is not in does not exist for him
    browser_errors.allow(r"status of 404 .*/billing/statements/")
    response = page.goto(f"/billing/statements/{last_month}/vision/")
    assert response.status == 404

    page.context.clear_cookies()  # sign bob out
    page = login_as("fran")
    page.goto(f"/billing/?period={last_month}")
    nlp_cost = page.locator("[data-team='nlp'] [data-testid='team-cost']").inner_text()
    # The page names the currency once, in the column header.
    assert f"{nlp_cost} USD" == statement_total  # the page and the statement agree to the cent
    with page.expect_download() as info:
        page.locator("[data-testid='downloads'] a[data-format='statements']").click()
    archive = zipfile.ZipFile(info.value.path())
    assert f"statement-{last_month}-nlp-draft.html" in archive.namelist()
    html = archive.read(f"statement-{last_month}-nlp-draft.html").decode()
    assert f'data-testid="statement-total">{statement_total}<' in html
