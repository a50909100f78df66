"""The cost page's team totals, summed by the database, are the sums of the exports' rounded
detail lines to the cent: every team, the platform, each part of the cost and the hours."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.billing.exports import team_totals
from apps.billing.exports.lines import DETAIL, ExportScope, _merged, export_lines, gpu_hours
from tests.billing.test_reconciliation import month  # noqa: F401 - the seeded month

pytestmark = pytest.mark.django_db

FIELDS = ("team_id", "team__slug", "team__name", "team__cost_center", "sub_account")


def summed_from_lines(period) -> list[dict]:
    """The team totals as the rounded detail lines of the export add up in Python."""
    rows = list(
        _merged(
            export_lines(ExportScope(period, None, DETAIL)), lambda line: line["team_id"], FIELDS
        )
    )
    for row in rows:
        row["gpu_hours"] = gpu_hours(row["sum_gpu_seconds"])
        row["busy_gpu_hours"] = gpu_hours(row["sum_busy_seconds"])
        row["held_idle_gpu_hours"] = gpu_hours(row["held_idle_seconds"])
        row["over_quota_gpu_hours"] = gpu_hours(row["over_quota_seconds"])
    return rows


def test_team_totals_in_sql_equal_the_sums_of_the_rounded_export_lines(month):  # noqa: F811
    period = month["period"]
    expected = summed_from_lines(period)
    with CaptureQueriesContext(connection) as queries:
        got = team_totals(period)
    assert len(queries) == 1
    assert [row["sub_account"] for row in got] == [row["sub_account"] for row in expected]
    assert got[-1]["team_id"] is None  # the platform's idle capacity, last
    for mine, theirs in zip(got, expected, strict=True):
        assert set(mine) == set(theirs)
        for name, value in theirs.items():
            assert mine[name] == value, (mine["sub_account"], name)
            if isinstance(value, Decimal) and value:
                assert str(mine[name]) == str(value), (mine["sub_account"], name)
    # the fixture exercises every part: over quota, held idle, energy and an adjustment
    for part in (
        "busy_cost",
        "held_idle_cost",
        "over_quota_cost",
        "energy_cost",
        "adjustment_cost",
    ):
        assert any(row[part] for row in got), part
    assert sum(row["cost"] for row in got) == sum(row["cost"] for row in expected)
