"""The database rounds money to cents exactly as Python does (half to even, also below zero):
statements are summed from lines rounded in SQL, exports from lines rounded in Python, and the
two must agree to the cent."""

import random
import sqlite3
from decimal import Decimal

import pytest
from django.db import connection

from apps.billing.exports import cents
from apps.billing.exports.query import (
    CENTS_PER_UNIT,
    ROUNDED_TOTALS,
    TEAMS_SELECT,
    UNITS_PER_CENT,
    _cents,
    _sql,
)
from tests.billing.test_reconciliation import month  # noqa: F401 - the seeded month

pytestmark = pytest.mark.django_db
HALF = UNITS_PER_CENT // 2


def amounts() -> list[int]:
    rng = random.Random(31)
    ties = [k * UNITS_PER_CENT + HALF for k in range(-4, 4)]  # x.xx5 exactly, odd and even
    near = [tie + step for tie in ties for step in (-1, 1)]
    wide = [rng.randrange(-(10**15), 10**15) for _ in range(40)]
    return [0, 1, -1, *ties, *near, *wide]


def sql_cents(units: int, cast: str = "BIGINT") -> Decimal:
    expression = _cents(f"CAST(%s AS {cast})")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {expression}", [units] * expression.count("%s"))
        return Decimal(int(cursor.fetchone()[0])).scaleb(-2)


def test_sql_rounding_matches_python_half_even():
    for units in amounts():
        exact = Decimal(units).scaleb(-10)
        assert sql_cents(units) == cents(exact), units


def test_sql_rounding_of_running_totals_past_a_bigint():
    """A month's running total in yen passes 2**63 units of 1e-10 (920 million yen); the
    database keeps it as an exact numeric and rounds it as Python does."""
    big = 2**63 // UNITS_PER_CENT * UNITS_PER_CENT  # a whole number of cents past 2**63 units
    for offset in (HALF, 3 * HALF, HALF - 1, HALF + 1, UNITS_PER_CENT + HALF, 7):
        for units in (big + offset, -big - offset, 10**25 + offset):
            exact = Decimal(units).scaleb(-10)
            assert sql_cents(units, "NUMERIC") == cents(exact), units


def test_sqlite_rounding_matches_python_half_even():
    """The demo's database (SQLite, integer arithmetic) rounds as Python does too."""
    expression = _cents("?", vendor="sqlite").replace("%%", "%")
    with sqlite3.connect(":memory:") as database:
        for units in amounts():
            row = database.execute(f"SELECT {expression}", [units] * expression.count("?"))
            exact = Decimal(units).scaleb(-10)
            assert Decimal(row.fetchone()[0]).scaleb(-2) == cents(exact), units


def rounded_where_computed(plan: dict) -> int:
    """How many roundings to cents the plan computes: counted in the lowest nodes that show
    any (a node above repeats the expressions of a child it reads them from)."""
    below = sum(rounded_where_computed(child) for child in plan.get("Plans", ()))
    return below or " ".join(plan.get("Output", ())).count(f"* {CENTS_PER_UNIT})")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plan")
def test_each_running_total_is_rounded_once_per_line(month):  # noqa: F811
    """The team totals round each point of the running total once per line, not once for
    every line figure made from it (the rounding was 40 % of the statements' query)."""
    sql, params = _sql(month["period"], None, TEAMS_SELECT)
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0][0]["Plan"]
    assert rounded_where_computed(plan) == len(ROUNDED_TOTALS)
