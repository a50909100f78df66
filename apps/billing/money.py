"""Sums of decimal columns that are exact on every database the portal runs on."""

from decimal import Decimal

from django.db.models import BigIntegerField, F, Sum, Value
from django.db.models.functions import Cast, Round


class ExactSum(Sum):
    """SUM of a decimal expression with `places` decimal places, exact on PostgreSQL and SQLite.

    SQLite stores decimals as binary floats and sums them as floats, so a total can come back a
    hair off its exact value, and a total that is exactly half a cent (common: prices in cents
    times half hours) then rounds the other way in one export than in another. Each value is
    therefore summed as a whole number of its last decimal place (an integer, which both
    databases add exactly) and turned back into a Decimal here. Exact for values below
    900,000 per row on SQLite (2**53 units of 1e-10), which a ledger slice never reaches.
    """

    def __init__(self, expression, *, places: int = 10, **extra) -> None:
        self.places = places
        if isinstance(expression, str):
            expression = F(expression)
        units = Cast(Round(expression * Value(10**places)), BigIntegerField())
        super().__init__(units, output_field=BigIntegerField(), **extra)

    def convert_value(self, value, expression, connection):
        return None if value is None else Decimal(int(value)).scaleb(-self.places)
