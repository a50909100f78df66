"""Exports stream: the memory an export takes does not grow with the month's size. Each format
is exported for a month of N lines and of 4N lines; its peak Python memory (tracemalloc) may
grow by far less than the file does, which fails if any format built the whole file, or all
its lines, in memory. (Fetch batches and CSV chunks are made small here, so that the months
are many batches long.)"""

import os
import tracemalloc
from datetime import timedelta
from decimal import Decimal

import pytest
from django.template.loader import render_to_string

from apps.billing import exports, focus, focus_sql, statements
from apps.billing.choices import ChargeSource
from apps.billing.exports import query as export_query
from apps.billing.exports import tables
from apps.billing.models import BillingPeriod, LedgerEntry
from apps.fleet.models import Gpu
from tests.billing.conftest import NOV

pytestmark = pytest.mark.django_db


def add_days(period, teams, first_day: int, days: int) -> None:
    """One charged hour per GPU and day (a booking of one of the teams, alternately), so the
    month gets one detail line per GPU-day."""
    gpus = list(Gpu.objects.select_related("model").order_by("pk"))
    rows = []
    for day in range(first_day, first_day + days):
        start = NOV + timedelta(days=day, hours=10)
        for number, gpu in enumerate(gpus):
            cost = Decimal("2.5") + Decimal(number) / 7
            rows.append(
                LedgerEntry(
                    period=period, team=teams[number % 2], source=ChargeSource.RESERVATION,
                    source_id=1000 * day + number, gpu=gpu, gpu_model=gpu.model,
                    slice_start=start, slice_end=start + timedelta(hours=1), gpu_seconds=3600,
                    busy_seconds=1000 + number, energy_kwh=Decimal("0.7"),
                    unit_price=Decimal("2.5"), gpu_cost=cost, energy_cost=Decimal("0.21"),
                    idle_cost=(cost * (2600 - number) / 3600).quantize(Decimal("1e-10")),
                    cost=cost + Decimal("0.21"),
                )
            )  # fmt: skip
    LedgerEntry.objects.bulk_create(rows)


def focus_csv(period):
    scope = exports.ExportScope(period)
    return exports.csv_chunks(focus.focus_columns(), focus.focus_rows(scope))


def focus_export(period):
    """As the API streams it (on PostgreSQL rendered by the database, `focus_sql`)."""
    return focus.focus_csv_chunks(exports.ExportScope(period))


def table_csv(period):
    scope = exports.ExportScope(period, level=exports.DETAIL)
    columns = exports.table_columns(exports.DETAIL, showback=False)
    return exports.csv_chunks(columns, exports.table_rows(scope))


def json_document(period):
    scope = exports.ExportScope(period, level=exports.DETAIL)
    return exports.json_chunks(scope, exports.table_rows(scope))


def xlsx_file(period):
    with exports.xlsx_file(exports.ExportScope(period)) as handle:
        yield handle.seek(0, os.SEEK_END)  # the file's size, without reading it back


def statements_zip(period):
    def render(statement):
        return render_to_string("billing/statement_file.html", {"statement": statement})

    with statements.statements_zip_file(period, render) as handle:
        yield handle.seek(0, os.SEEK_END)


def peak_and_size(export, period) -> tuple[int, int]:
    """Peak traced memory while the export is written to a sink that keeps nothing, and the
    size of what it wrote (exports written to a file give its size)."""
    for _ in export(period):  # warm up: imports, templates, cached compiled queries
        pass
    tracemalloc.start()
    try:
        size = sum(chunk if isinstance(chunk, int) else len(chunk) for chunk in export(period))
        return tracemalloc.get_traced_memory()[1], size
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "export",
    [focus_csv, focus_export, table_csv, json_document, xlsx_file, statements_zip],
    ids=lambda f: f.__name__,
)
def test_an_exports_peak_memory_does_not_grow_with_the_month(
    export, team, other_team, fleet, rates, monkeypatch
):
    monkeypatch.setattr(export_query, "FETCH_ROWS", 20)
    monkeypatch.setattr(focus_sql, "FETCH_LINES", 20)
    monkeypatch.setattr(tables, "CHUNK_CHARS", 2048)
    period = BillingPeriod.objects.create(month=NOV.date())
    add_days(period, [team, other_team], 0, 5)  # N lines: 5 days x 20 GPUs
    small_peak, small_size = peak_and_size(export, period)
    add_days(period, [team, other_team], 5, 15)  # 4N lines
    large_peak, large_size = peak_and_size(export, period)

    assert LedgerEntry.objects.count() == 4 * 5 * Gpu.objects.count()
    grown = large_peak - small_peak
    # A small fixed allowance for what any run allocates a little differently; holding the
    # file (or its lines) would grow the peak by at least what the file grew.
    assert grown < 16 * 1024 + (large_size - small_size) / 8, (small_peak, large_peak)
    if export in (focus_csv, focus_export, table_csv, json_document):
        assert large_size > 3 * small_size  # the file did grow with the month
    elif export is xlsx_file:
        assert large_size > small_size  # (compressed)
