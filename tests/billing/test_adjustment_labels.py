"""Adjustments say which month they correct: the chargeback form takes it, the service refuses
a later month, and every export (CSV, JSON, XLSX, FOCUS) and the statement label the line."""

import csv
import io
import json

import openpyxl
import pytest
from django.utils import timezone

from apps.billing.models import Adjustment, LedgerEntry
from tests.conftest import client_for

pytestmark = pytest.mark.django_db
LABEL = "Adjustment for 2026-11: GPU 3 was down on Nov 5"


def book(client, team, **extra):
    data = {"team": team.slug, "amount": "-4.50", "reason": "GPU 3 was down on Nov 5", **extra}
    return client.post("/billing/?period=2026-11", data, follow=True)


def export(user, query: str) -> bytes:
    month = f"{timezone.now():%Y-%m}"
    response = client_for(user).get(f"/api/v1/chargeback/?period={month}&{query}")
    assert response.status_code == 200
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_the_form_books_the_month_it_corrects_and_every_export_labels_it(
    client, finance_user, november, team
):
    client.force_login(finance_user)
    page = book(client, team, corrects_period="2026-11").content.decode()
    assert "Adjustment of -4.50 booked" in page
    adjustment = Adjustment.objects.get()
    assert adjustment.corrects_period == november
    assert adjustment.period.month == timezone.now().date().replace(day=1)  # booked now
    shown = client.get(f"/billing/?period={timezone.now():%Y-%m}").content.decode()
    assert 'data-testid="adjustment-corrects">2026-11<' in shown

    for level in ("summary", "detail"):
        rows = list(csv.DictReader(io.StringIO(export(finance_user, f"level={level}").decode())))
        (line,) = [r for r in rows if r["line_type"] == "adjustment"]
        assert line["description"] == LABEL and line["adjustment_cost"] == "-4.50", level
        assert line["team"] == team.slug
        assert all(r["description"] for r in rows)  # no unlabelled line
        document = json.loads(export(finance_user, f"format=json&level={level}"))
        (line,) = [r for r in document["rows"] if r["line_type"] == "adjustment"]
        assert line["description"] == LABEL
    book_rows = openpyxl.load_workbook(io.BytesIO(export(finance_user, "format=xlsx")))
    detail = list(book_rows["Detail"].iter_rows(values_only=True))
    header = detail[0]
    (line,) = [r for r in detail[1:-1] if r[header.index("line_type")] == "adjustment"]
    assert line[header.index("description")] == LABEL
    for version in ("1.2", "1.3"):
        text = export(finance_user, f"format=focus&focus_version={version}").decode()
        (line,) = [r for r in csv.DictReader(io.StringIO(text)) if r["x_LineType"] == "adjustment"]
        assert line["ChargeDescription"] == LABEL and line["ChargeCategory"] == "Adjustment"
    statement = client.get(f"/billing/statements/{timezone.now():%Y-%m}/{team.slug}/")
    assert LABEL in statement.content.decode()


def test_the_month_shown_is_the_default(client, finance_user, november, team):
    client.force_login(finance_user)
    book(client, team)
    assert Adjustment.objects.get().corrects_period == november


@pytest.mark.parametrize(
    ("month", "message"),
    [
        ("2026-13", "period must be a month written YYYY-MM"),
        ("Nov 2026", "Give the month it corrects as YYYY-MM"),
        ("2099-01", "is in the future"),
        ("2025-02", "2025-02 has no charges to correct"),
    ],
)
def test_a_bad_month_is_refused_inline_and_nothing_is_written(
    client, finance_user, november, team, month, message
):
    client.force_login(finance_user)
    before = LedgerEntry.objects.count()
    page = book(client, team, corrects_period=month).content.decode()
    assert message in page
    assert 'data-testid="billing-error"' in page
    assert not Adjustment.objects.exists() and LedgerEntry.objects.count() == before


def test_an_adjustment_cannot_correct_a_later_month(finance_user, team, november):
    from django.core.exceptions import ValidationError

    from apps.billing.services import adjustment_create

    with pytest.raises(ValidationError, match="or an earlier month"):
        adjustment_create(
            actor=finance_user, team=team, amount=-1, reason="x", period=november,
            corrects_period=_later_period(november),
        )  # fmt: skip
    assert not Adjustment.objects.exists()


def _later_period(period):
    from apps.billing.services import period_get_or_create

    return period_get_or_create(period.month.replace(month=12))
