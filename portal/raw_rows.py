"""Raw SQL reads whose datetimes come back as the ORM would give them, on PostgreSQL and SQLite.

Hot paths (booking admission) read a few rows with hand-written SQL because building the ORM's
query costs more CPU than running it."""

from collections.abc import Sequence

from django.db import connection


def fetch_rows(sql: str, params: Sequence, *, datetime_columns: Sequence[int]) -> list[tuple]:
    """The rows of ``sql``. SQLite returns datetimes as text (naive UTC); the columns at
    ``datetime_columns`` are converted to aware datetimes there, as the ORM converts them."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if connection.vendor != "sqlite":
        return rows
    convert = connection.ops.convert_datetimefield_value
    return [
        tuple(
            convert(value, None, None) if index in datetime_columns else value
            for index, value in enumerate(row)
        )
        for row in rows
    ]
