"""An export that fails is an error the user sees, never a short file that looks whole.

Streamed formats (CSV, FOCUS, JSON, the efficiency CSVs) read their first row before the
response starts, so an early failure is a 500; a later one ends the body with an ERROR line
and aborts the transfer. XLSX and the statements ZIP are built whole before anything is sent:
a failure there is a 500 and no file."""

import csv
import io
import json

import pytest
from django.db import DatabaseError
from django.test import Client

from apps.billing import exports, focus, statements
from portal.downloads import FAILURE_LINE, DownloadInterrupted

pytestmark = pytest.mark.django_db

API = "/api/v1/chargeback/"


def failing_after(rows_before_failure: int, source):
    """Wraps a row source: it yields that many of the real rows, then the database fails."""

    def rows(*args, **kwargs):
        produced = source(*args, **kwargs)
        try:
            for _ in range(rows_before_failure):
                yield next(produced)
        finally:
            produced.close()  # its server-side cursor, before the test's transaction ends
        raise DatabaseError("connection lost")

    return rows


def read_streamed(response) -> tuple[str, Exception | None]:
    """The body as the client received it before the transfer ended, and why it ended."""
    received = []
    try:
        for chunk in response.streaming_content:
            received.append(chunk.decode())
    except Exception as error:  # noqa: BLE001 - the abort is what is checked
        return "".join(received), error
    return "".join(received), None


@pytest.fixture
def finance_client(finance_user):
    client = Client(raise_request_exception=False)
    client.force_login(finance_user)
    return client


@pytest.mark.parametrize(
    ("params", "target"),
    [
        ({"format": "csv", "level": "detail"}, (exports, "table_rows")),
        ({"format": "json", "level": "detail"}, (exports, "table_rows")),
        ({"format": "focus", "focus_version": "1.3"}, (focus, "focus_csv_chunks")),
        ({"format": "focus", "focus_version": "1.2"}, (focus, "focus_csv_chunks")),
    ],
)
def test_a_stream_failing_part_way_ends_with_an_error_and_aborts(
    november, finance_client, monkeypatch, params, target
):
    module, name = target
    complete = finance_client.get(API, {"period": "2026-11", **params})
    whole, error = read_streamed(complete)
    assert error is None and FAILURE_LINE.strip() not in whole

    monkeypatch.setattr(module, name, failing_after(1, getattr(module, name)))
    response = finance_client.get(API, {"period": "2026-11", **params})
    assert response.status_code == 200  # the first row was good: the stream had started
    body, error = read_streamed(response)
    assert isinstance(error, DownloadInterrupted)
    assert body.endswith(FAILURE_LINE) and len(body) < len(whole) + len(FAILURE_LINE)
    if params["format"] == "json":
        with pytest.raises(json.JSONDecodeError):  # no reader takes it for a whole document
            json.loads(body)
    else:
        last = list(csv.reader(io.StringIO(body)))[-1]
        assert last[0].startswith("ERROR: the export failed part-way")


@pytest.mark.parametrize("fmt", ["csv", "json", "focus"])
def test_a_stream_failing_before_its_first_row_is_a_500_not_an_empty_file(
    november, finance_client, monkeypatch, fmt
):
    monkeypatch.setattr(exports, "table_rows", failing_after(0, exports.table_rows))
    monkeypatch.setattr(focus, "focus_csv_chunks", failing_after(0, focus.focus_csv_chunks))
    response = finance_client.get(API, {"period": "2026-11", "format": fmt})
    assert response.status_code == 500
    assert "attachment" not in response.get("Content-Disposition", "")


def test_an_xlsx_failing_part_way_is_a_500_and_no_file(november, finance_client, monkeypatch):
    tables = exports.tables  # where the workbook reads its rows
    monkeypatch.setattr(tables, "table_rows", failing_after(1, tables.table_rows))
    response = finance_client.get(API, {"period": "2026-11", "format": "xlsx"})
    assert response.status_code == 500
    assert "attachment" not in response.get("Content-Disposition", "")


def test_a_statements_zip_failing_part_way_is_a_500_and_no_file(
    november, finance_client, monkeypatch
):
    real = statements.team_statements

    def first_then_failure(period, teams=None):
        yield next(iter(real(period, teams)))
        raise DatabaseError("connection lost")

    monkeypatch.setattr(statements, "team_statements", first_then_failure)
    response = finance_client.get("/billing/statements/2026-11.zip")
    assert response.status_code == 500
    assert "attachment" not in response.get("Content-Disposition", "")
