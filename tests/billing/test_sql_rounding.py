"""The database rounds money to cents exactly as Python does (half to even, also below zero):
statements are summed from lines rounded in SQL, exports from lines rounded in Python, and the
two must agree to the cent."""

import random
from decimal import Decimal

import pytest
from django.db import connection

from apps.billing.exports import cents
from apps.billing.exports.query import UNITS_PER_CENT, _cents

pytestmark = pytest.mark.django_db
HALF = UNITS_PER_CENT // 2


def sql_cents(units: int) -> Decimal:
    expression = _cents("CAST(%s AS BIGINT)")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {expression}", [units] * expression.count("%s"))
        return Decimal(int(cursor.fetchone()[0])).scaleb(-2)


def test_sql_rounding_matches_python_half_even():
    rng = random.Random(31)
    ties = [k * UNITS_PER_CENT + HALF for k in range(-4, 4)]  # x.xx5 exactly, odd and even
    near = [tie + step for tie in ties for step in (-1, 1)]
    wide = [rng.randrange(-(10**15), 10**15) for _ in range(40)]
    for units in [0, 1, -1, *ties, *near, *wide]:
        exact = Decimal(units).scaleb(-10)
        assert sql_cents(units) == cents(exact), units
