"""Bulk inserts that skip rows already stored, fast on PostgreSQL and correct on SQLite.

Used where idempotent writers (telemetry ingest, billing metering) append many rows keyed by a
unique constraint: a re-run must insert nothing twice and must not fail.
"""

from collections.abc import Iterable, Sequence

from django.db import connection, transaction


def insert_ignoring_duplicates(
    table: str,
    columns: Sequence[str],
    rows: Iterable[tuple],
    *,
    conflict: Sequence[str],
    known_new: bool = False,
) -> int:
    """Insert `rows` into `table`, skipping any that violate the unique key `conflict`.

    PostgreSQL: COPY into a temporary staging table, then one INSERT ... SELECT ... ON CONFLICT
    DO NOTHING; with `known_new` (the caller holds a lock and has checked that none of the rows
    can exist yet) a plain COPY into the table, several times faster. SQLite: executemany of
    INSERT ... ON CONFLICT DO NOTHING. Datetimes must be aware; they are adapted as the ORM
    would store them. Returns the number of rows inserted.
    """
    column_list = ", ".join(columns)
    conflict_list = ", ".join(conflict)
    if connection.vendor != "postgresql":
        adapt = connection.ops.adapt_datetimefield_value
        prepared = [tuple(_adapt_sqlite(value, adapt) for value in row) for row in rows]
        if not prepared:
            return 0
        placeholders = ", ".join(["%s"] * len(columns))
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {table} ({column_list}) VALUES ({placeholders}) "  # noqa: S608
                f"ON CONFLICT ({conflict_list}) DO NOTHING",
                prepared,
            )
            return cursor.rowcount
    if known_new:
        inserted = 0
        with (
            transaction.atomic(),
            connection.cursor() as cursor,
            cursor.cursor.copy(f"COPY {table} ({column_list}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
                inserted += 1
        return inserted
    staging = f"{table}_staging"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {staging} ON COMMIT DROP AS "  # noqa: S608
            f"SELECT {column_list} FROM {table} WITH NO DATA"
        )
        staged = 0
        with cursor.cursor.copy(f"COPY {staging} ({column_list}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
                staged += 1
        if not staged:
            cursor.execute(f"DROP TABLE {staging}")
            return 0
        cursor.execute(
            f"INSERT INTO {table} ({column_list}) SELECT {column_list} FROM {staging} "  # noqa: S608
            f"ON CONFLICT ({conflict_list}) DO NOTHING"
        )
        inserted = cursor.rowcount
        cursor.execute(f"DROP TABLE {staging}")
    return inserted


def _adapt_sqlite(value, adapt_datetime):
    if hasattr(value, "tzinfo") and hasattr(value, "hour"):
        return adapt_datetime(value)
    if hasattr(value, "as_tuple"):  # Decimal: SQLite stores the text form the ORM would
        return str(value)
    return value
