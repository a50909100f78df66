"""The XLSX export as finance opens it: number formats, widths, a frozen header, an autofilter,
totals rows of SUM formulas that add up to the page, and no empty column."""

import datetime
import io
from decimal import Decimal

import openpyxl
import pytest
from django.test import override_settings

from apps.billing import exports
from tests.billing import reconcile
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def workbook_of(user, query="period=2026-09&format=xlsx"):
    response = client_for(user).get(f"/api/v1/chargeback/?{query}")
    assert response.status_code == 200
    return openpyxl.load_workbook(io.BytesIO(b"".join(response)))


@pytest.fixture
def month():
    return reconcile.build_random_month(5)


def test_detail_sheet_is_laid_out_for_finance(month, finance_user):
    sheet = workbook_of(finance_user)["Detail"]
    rows = list(sheet.iter_rows())
    header = [cell.value for cell in rows[0]]
    data, totals = rows[1:-1], rows[-1]
    assert data
    assert sheet.freeze_panes == "A2"
    assert sheet.auto_filter.ref == f"A1:{sheet.cell(1, len(header)).column_letter}{len(rows) - 1}"
    column = {name: index for index, name in enumerate(header)}
    cost = data[0][column["cost"]]
    assert cost.number_format == '#,##0.00 "USD";-#,##0.00 "USD"'
    assert data[0][column["gpu_hours"]].number_format == "#,##0.00"
    assert data[0][column["energy_kwh"]].number_format == "#,##0.000"
    assert isinstance(data[0][column["day"]].value, datetime.datetime)  # a date, not text
    for index, name in enumerate(header):
        letter = rows[0][index].column_letter
        assert sheet.column_dimensions[letter].width >= len(name), name
        assert any(row[index].value not in (None, "") for row in data), f"{name} is empty"
    assert totals[0].value == exports.TOTAL_LABEL
    last = len(rows) - 1
    letter = cost.column_letter
    assert totals[column["cost"]].value == f"=SUM({letter}2:{letter}{last})"
    assert totals[column["cost"]].number_format == cost.number_format
    summed = [name for name in header if str(totals[column[name]].value).startswith("=SUM(")]
    assert set(summed) == {
        "gpu_hours", "busy_gpu_hours", "held_idle_gpu_hours", "over_quota_gpu_hours",
        "energy_kwh", "cost", "busy_cost", "held_idle_cost", "over_quota_cost", "energy_cost",
        "adjustment_cost",
    }  # fmt: skip
    # what the SUM will show equals the page's total to the cent
    values = sum(Decimal(str(row[column["cost"]].value)) for row in data)
    assert values == sum(reconcile.page_totals(month).values())


def test_summary_sheet_has_invoice_ids_checks_and_totals(month, finance_user):
    sheet = workbook_of(finance_user)["Summary"]
    rows = list(sheet.iter_rows(values_only=True))
    assert rows[0] == ("team", "invoice_id", "gpu_hours", "cost", "check_from_detail")
    assert sheet.freeze_panes == "A2" and sheet.auto_filter.ref == f"A1:E{len(rows) - 1}"
    page = reconcile.page_totals(month)
    assert {r[0]: Decimal(str(r[3])) for r in rows[1:-1]} == page
    assert {r[1] for r in rows[1:-1]} == {f"DRAFT-GPU-2026-09-{team}" for team in page}
    for number, row in enumerate(rows[1:-1], start=2):
        assert row[4].startswith("=SUMIF(Detail!$C$2:$C$") and f",A{number}," in row[4]
    assert rows[-1] == ("Total", None, f"=SUM(C2:C{len(rows) - 1})",
                        f"=SUM(D2:D{len(rows) - 1})", f"=SUM(E2:E{len(rows) - 1})")  # fmt: skip
    assert sheet["D2"].number_format == '#,##0.00 "USD";-#,##0.00 "USD"'


def test_a_teams_workbook_holds_only_that_team(month, finance_user):
    slug = next(t for t in reconcile.page_totals(month) if t != "platform")
    book = workbook_of(finance_user, f"period=2026-09&format=xlsx&team={slug}")
    detail = list(book["Detail"].iter_rows(values_only=True))
    assert {row[2] for row in detail[1:-1]} == {slug}
    assert [row[0] for row in list(book["Summary"].iter_rows(values_only=True))[1:-1]] == [slug]


@override_settings(BILLING_MODE="showback")
def test_showback_workbooks_have_no_money_columns_or_formats(month, finance_user):
    book = workbook_of(finance_user)
    header = [c.value for c in next(book["Detail"].iter_rows())]
    assert "cost" not in header and "currency" not in header
    summary = list(book["Summary"].iter_rows())
    assert [c.value for c in summary[0]] == ["team", "gpu_hours", "check_from_detail"]
    assert summary[1][2].number_format == "#,##0.00"
    for row in book["Detail"].iter_rows(min_row=2):
        assert all("USD" not in str(cell.number_format) for cell in row)
