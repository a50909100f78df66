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
    return _as_orm_reads(rows, datetime_columns)


def fetch_row_sets(statements: Sequence[tuple[str, Sequence, Sequence[int]]]) -> list[list[tuple]]:
    """The rows of each (sql, params, datetime_columns) statement, run in order, as
    `fetch_rows` reads them. On PostgreSQL with client-side binding (the default) they travel
    in one round trip, each still its own statement (a statement after a lock sees what the
    lock's previous holder committed); elsewhere one after another."""
    batched = connection.vendor == "postgresql" and not connection.settings_dict["OPTIONS"].get(
        "server_side_binding"
    )
    with connection.cursor() as cursor:
        if not batched:
            row_sets = []
            for sql, params, _ in statements:
                cursor.execute(sql, params)
                row_sets.append(cursor.fetchall())
        else:
            cursor.execute(
                "; ".join(sql for sql, _, _ in statements),
                [param for _, params, _ in statements for param in params],
            )
            row_sets = [cursor.fetchall()]
            while len(row_sets) < len(statements):
                cursor.nextset()
                row_sets.append(cursor.fetchall())
    return [
        _as_orm_reads(rows, datetime_columns)
        for rows, (_, _, datetime_columns) in zip(row_sets, statements, strict=True)
    ]


def _as_orm_reads(rows: list[tuple], datetime_columns: Sequence[int]) -> list[tuple]:
    if connection.vendor != "sqlite" or not datetime_columns:
        return rows
    convert = connection.ops.convert_datetimefield_value
    return [
        tuple(
            convert(value, None, None) if index in datetime_columns else value
            for index, value in enumerate(row)
        )
        for row in rows
    ]


def columns_of(model, alias: str) -> str:
    """The SELECT list of ``model``'s concrete columns (table alias ``alias``), in the order
    `instance_from_row` reads them."""
    return ", ".join(f'{alias}."{field.column}"' for field in model._meta.concrete_fields)


def instance_from_row(model, values: Sequence):
    """An instance of ``model`` from the values of `columns_of`, each converted as the ORM
    converts a column read from this database (SQLite's booleans and datetimes, JSON)."""
    fields = model._meta.concrete_fields
    converted = []
    for field, value in zip(fields, values, strict=True):
        if value is not None:
            column = field.get_col(model._meta.db_table)
            for convert in (
                *connection.ops.get_db_converters(column),
                *field.get_db_converters(connection),
            ):
                value = convert(value, column, connection)
        converted.append(value)
    return model.from_db(connection.alias, [field.attname for field in fields], converted)
