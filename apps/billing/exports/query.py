"""The one query behind every export: the month's ledger grouped into detail lines, named and
ordered in the database; for the statements also rounded there and summed.

The database groups the ledger rows by ids only (narrow rows), joins the names to the groups,
and computes with window functions what each line needs from the lines before it in the
export's fixed order: the exact cost before it (from which its cents follow), and the seconds
of its GPU-day before it and in all (FOCUS's allocation ratios). Exact amounts travel as whole
numbers of 1e-10 (`ExactSum`), so the rounding is integer arithmetic, the same on PostgreSQL and
SQLite. Rows stream from a server-side cursor, so memory stays bounded whatever the month's size.

`rounded_groups` applies the running-total rule of `lines.RunningRounder` in SQL (`_cents`,
`_rounding`) and sums the rounded lines by team, GPU model and source, so a statement needs no
pass over the month's lines in Python. The two are held equal by the tests (every statement
reconciles with every export to the cent, and `_cents` with `lines.cents`).
"""

from collections.abc import Iterator
from datetime import UTC, date
from decimal import Decimal

from django.db import connection
from django.db.models import Case, F, IntegerField, Sum, Value, When
from django.db.models.functions import TruncDate

from apps.billing.choices import ChargeSource
from apps.billing.models import BillingPeriod, LedgerEntry
from apps.billing.money import ExactSum

EXACT_PLACES = 10  # ExactSum's default: money in whole units of 1e-10
UNITS_PER_CENT = 10 ** (EXACT_PLACES - 2)
CENTS_PER_UNIT = format(Decimal(1).scaleb(2 - EXACT_PLACES), "f")  # 0.00000001
FETCH_ROWS = 2000

# What the database groups by: ids only; the names are joined to the groups afterwards.
GROUP_KEYS = (
    "team_id", "day", "gpu_model_id", "source", "source_id", "gpu_id", "over_quota",
    "unit_price", "rate_card_id",
)  # fmt: skip
SUMS = (
    "sum_gpu_seconds", "sum_busy_seconds", "held_idle_seconds", "sum_energy_kwh",
    "over_quota_seconds", "exact_cost", "held_idle_cost", "sum_energy_cost", "over_quota_cost",
)  # fmt: skip
LABELS = {
    "team_slug": "team__slug", "team_name": "team__name",
    "team_cost_center": "team__cost_center", "model_name": "gpu_model__name",
    "gpu_uuid": "gpu__uuid", "node_hostname": "gpu__node__hostname", "gpu_index": "gpu__index",
}  # fmt: skip
RUNNING = ("cost_before", "gpu_day_before", "gpu_day_seconds")
# The export's fixed order (the running total's), over the columns of `named` below.
LINE_ORDER = (
    "team_slug ASC NULLS LAST, day, model_name ASC NULLS FIRST, source, source_id, "
    "gpu_uuid ASC NULLS FIRST, over_quota, unit_price, rate_card_id"
)
LINES_SQL = """
WITH grouped AS ({grouped}),
named AS (
    SELECT {grouped_columns},
           t.slug AS team_slug, t.name AS team_name, t.cost_center AS team_cost_center,
           m.name AS model_name, g.uuid AS gpu_uuid, n.hostname AS node_hostname,
           g."index" AS gpu_index
    FROM grouped
    LEFT JOIN teams_team t ON t.id = grouped.team_id
    LEFT JOIN fleet_gpumodel m ON m.id = grouped.gpu_model_id
    LEFT JOIN fleet_gpu g ON g.id = grouped.gpu_id
    LEFT JOIN fleet_node n ON n.id = g.node_id
),
ordered AS (
    SELECT named.*,
           COALESCE(SUM(exact_cost) OVER (
               ORDER BY {order} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0
           ) AS cost_before,
           COALESCE(SUM(sum_gpu_seconds) OVER (
               PARTITION BY gpu_id, day ORDER BY {order}
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0
           ) AS gpu_day_before,
           SUM(sum_gpu_seconds) OVER (PARTITION BY gpu_id, day) AS gpu_day_seconds
    FROM named
),
rounded_totals AS (
    SELECT ordered.*, {rounded_totals}
    FROM ordered {fence}
),
rounded AS (
    SELECT rounded_totals.*, {rounded_lines}
    FROM rounded_totals
)
{select}
"""


def _cents(units: str, vendor: str | None = None) -> str:
    """SQL: the whole number of cents nearest to `units` (1e-10 each), halves to even, as
    Python's ROUND_HALF_EVEN does, also below zero. `units` is written out more than once:
    pass a column (or a sum of two or three), not an expression that is costly to evaluate."""
    unit, half = UNITS_PER_CENT, UNITS_PER_CENT // 2
    if (vendor or connection.vendor) == "postgresql":
        # The running totals are exact `numeric` (a month's total in yen can pass 2**63 units):
        # scaling by 1e-8 is exact, ROUND takes a half away from zero, and MOD (with the sign of
        # `units`) is +-half exactly when that made an odd number of cents from a half whose
        # even neighbour is one cent nearer zero. Three numeric operations where the integer
        # way below takes about fifteen. The cents fit a bigint up to 92 quadrillion (in the
        # currency), and past that the cast fails rather than wraps; bigint makes the line
        # figures' differences and sums cheap.
        return (
            f"(CAST(ROUND(({units}) * {CENTS_PER_UNIT}) AS BIGINT) - CASE MOD({units}, {2 * unit}) "
            f"WHEN {half} THEN 1 WHEN {-half} THEN -1 ELSE 0 END)"
        )
    # SQLite: integer arithmetic (its decimals are floats). "%%": the modulo operator in a query
    # that also has parameters.
    rest = f"((({units}) %% {unit} + {unit}) %% {unit})"  # in [0, unit), also below zero
    down = f"((({units}) - {rest}) / {unit})"
    return (
        f"({down} + CASE WHEN {rest} > {half} THEN 1 "
        f"WHEN {rest} = {half} THEN ({down} %% 2 + 2) %% 2 ELSE 0 END)"
    )


# The points of the running total whose cents make a line's figures: before the line, after
# it, after its held idle part, after held idle and energy (the two lie side by side inside the
# line), after its over-quota part (which overlaps them). A part's point is rounded only where
# the part moves it off a point already rounded (NULL: it did not), which spares most lines
# all three: a job has no held idle, a month without energy prices none, a line is over quota
# all of it or none.
ROUNDED_TOTALS = {
    "before_cents": (None, "cost_before"),
    "after_cents": (None, "cost_before + exact_cost"),
    "after_idle_cents": ("held_idle_cost <> 0", "cost_before + held_idle_cost"),
    "after_energy_cents": (
        "sum_energy_cost <> 0",
        "cost_before + held_idle_cost + sum_energy_cost",
    ),
    "after_over_quota_cents": (
        "over_quota_cost NOT IN (0, exact_cost)",
        "cost_before + over_quota_cost",
    ),
}
# A line's cents: round(total after the part) minus round(total before it).
AFTER_IDLE = "COALESCE(after_idle_cents, before_cents)"
ROUNDED_LINES = {
    "cost_cents": "after_cents - before_cents",
    "held_idle_cents": f"{AFTER_IDLE} - before_cents",
    "energy_cents": f"COALESCE(after_energy_cents, {AFTER_IDLE}) - {AFTER_IDLE}",
    "over_quota_cents": (
        "CASE over_quota_cost WHEN 0 THEN 0 WHEN exact_cost THEN after_cents - before_cents "
        "ELSE after_over_quota_cents - before_cents END"
    ),
}


def _rounding() -> dict[str, str]:
    """The running-total rule in SQL, in two stages: each point of the running total is rounded
    once per line (`rounded_totals`, which `fence` keeps from being merged into the next stage,
    or PostgreSQL would round it again for every use of it), then the line figures are
    differences of those cents (`rounded`)."""
    totals = []
    for name, (needed, units) in ROUNDED_TOTALS.items():
        rounded = _cents(units)
        if needed:
            rounded = f"CASE WHEN {needed} THEN {rounded} END"
        totals.append(f"{rounded} AS {name}")
    lines = [f"{sql} AS {name}" for name, sql in ROUNDED_LINES.items()]
    # OFFSET 0: PostgreSQL plans a subquery with it on its own (SQLite has no need: its speed
    # here is the demo's).
    fence = "OFFSET 0" if connection.vendor == "postgresql" else ""
    separator = ",\n           "
    return {
        "rounded_totals": separator.join(totals),
        "rounded_lines": separator.join(lines),
        "fence": fence,
    }


def _held_idle_seconds():
    return Case(
        When(source=ChargeSource.RESERVATION, then=F("gpu_seconds") - F("busy_seconds")),
        default=0,
        output_field=IntegerField(),
    )


def _grouped_queryset(period: BillingPeriod):
    """The month's detail lines' exact sums, grouped by ids (the finest grouping every coarser
    figure is summed from)."""
    return (
        LedgerEntry.objects.filter(period_id=period.pk)
        .annotate(day=TruncDate("slice_start", tzinfo=UTC))
        .values(*GROUP_KEYS)
        .annotate(
            sum_gpu_seconds=Sum("gpu_seconds"),
            sum_busy_seconds=Sum("busy_seconds"),
            held_idle_seconds=Sum(_held_idle_seconds()),
            sum_energy_kwh=ExactSum("energy_kwh", places=6),
            over_quota_seconds=Sum(Case(When(over_quota=True, then=F("gpu_seconds")), default=0)),
            exact_cost=ExactSum("cost"),
            held_idle_cost=ExactSum("idle_cost"),
            sum_energy_cost=ExactSum("energy_cost"),
            over_quota_cost=ExactSum(
                Case(When(over_quota=True, then=F("cost")), default=Value(Decimal(0)))
            ),
        )
        .order_by()
    )


LINES_SELECT = "SELECT {columns} FROM ordered {where} ORDER BY {order}"
# Per team, GPU model and source (each adjustment apart): seconds, and cents of the cost and
# its parts (busy: what a booking's or job's line keeps after held idle and energy).
GROUPS_KEYS = (
    "team_id, model_name, source, CASE WHEN source = 'adjustment' THEN source_id ELSE 0 END"
)
GROUPS_SELECT = """
SELECT {keys}, SUM(sum_gpu_seconds), SUM(held_idle_seconds), SUM(over_quota_seconds),
       SUM(cost_cents),
       SUM(CASE WHEN source IN ('reservation', 'job')
                THEN cost_cents - held_idle_cents - energy_cents ELSE 0 END),
       SUM(held_idle_cents), SUM(over_quota_cents), SUM(energy_cents)
FROM rounded {where} GROUP BY {keys} ORDER BY {keys}
"""
GROUP_SUMS = (
    "sum_gpu_seconds", "held_idle_seconds", "over_quota_seconds", "cost", "busy_cost",
    "held_idle_cost", "over_quota_cost", "energy_cost",
)  # fmt: skip


# Per team (the platform last): seconds, exact amounts (1e-10 units; energy 1e-6 kWh) and cents
# of the cost and its parts, the sums `exports.team_totals` gives.
TEAMS_SELECT = """
SELECT team_id, team_slug, team_name, team_cost_center,
       SUM(sum_gpu_seconds), SUM(sum_busy_seconds), SUM(held_idle_seconds),
       SUM(over_quota_seconds),
       SUM(sum_energy_kwh), SUM(exact_cost), SUM(held_idle_cost), SUM(over_quota_cost),
       SUM(sum_energy_cost),
       SUM(cost_cents),
       SUM(CASE WHEN source IN ('reservation', 'job')
                THEN cost_cents - held_idle_cents - energy_cents ELSE 0 END),
       SUM(held_idle_cents), SUM(over_quota_cents), SUM(energy_cents),
       SUM(CASE WHEN source = 'adjustment' THEN cost_cents ELSE 0 END)
FROM rounded {where}
GROUP BY team_id, team_slug, team_name, team_cost_center
ORDER BY team_slug ASC NULLS LAST
"""
TEAM_SECONDS = ("sum_gpu_seconds", "sum_busy_seconds", "held_idle_seconds", "over_quota_seconds")
TEAM_EXACT = ("exact_cost", "exact_held_idle_cost", "exact_over_quota_cost", "exact_energy_cost")
TEAM_CENTS = (
    "cost", "busy_cost", "held_idle_cost", "over_quota_cost", "energy_cost", "adjustment_cost",
)  # fmt: skip


def _sql(period: BillingPeriod, team_id: int | None, select: str, **fields) -> tuple[str, tuple]:
    grouped = _grouped_queryset(period)
    inner, params = grouped.query.sql_with_params()
    quote = connection.ops.quote_name
    where = ""
    if team_id is not None:
        where, params = "WHERE team_id = %s", (*params, team_id)
    sql = LINES_SQL.format(
        grouped=inner,
        grouped_columns=", ".join(f"grouped.{quote(name)}" for name in (*GROUP_KEYS, *SUMS)),
        select=select.format(where=where, order=LINE_ORDER, **fields),
        order=LINE_ORDER,
        **_rounding(),
    )
    return sql, params


def line_rows(period: BillingPeriod, team_id: int | None) -> Iterator[dict]:
    """The detail lines (of one team, or all), named and ordered, with their running figures,
    streamed from a server-side cursor: one query. Money comes exact (Decimals); `lines`
    rounds it as it walks them."""
    columns = (*GROUP_KEYS, *SUMS, *LABELS, *RUNNING)
    sql, params = _sql(period, team_id, LINES_SELECT, columns=", ".join(columns))
    names = (*GROUP_KEYS, *SUMS, *LABELS.values(), *RUNNING)
    convert = _converters()
    with connection.chunked_cursor() as cursor:
        cursor.execute(sql, params)
        while batch := cursor.fetchmany(FETCH_ROWS):
            for values in batch:
                row = dict(zip(names, values, strict=True))
                for name, to_python in convert:
                    row[name] = to_python(row[name])
                yield row


def rounded_groups(period: BillingPeriod, team_id: int | None) -> list[dict]:
    """The month's lines (one team's, or all) rounded by the running-total rule and summed by
    the database per team, GPU model and source, each adjustment apart (`adjustment_id`):
    the same figures as the sums of `export_lines`' detail lines. One query, a few rows per
    team."""
    sql, params = _sql(period, team_id, GROUPS_SELECT, keys=GROUPS_KEYS)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    groups = []
    for team, model, source, adjustment_id, *sums in rows:
        group = {"team_id": team, "gpu_model__name": model, "source": source}
        group["adjustment_id"] = adjustment_id
        group.update(zip(GROUP_SUMS[:3], (int(value or 0) for value in sums[:3]), strict=True))
        group.update(zip(GROUP_SUMS[3:], map(from_cents, sums[3:]), strict=True))
        groups.append(group)
    return groups


def rounded_team_totals(period: BillingPeriod) -> list[dict]:
    """Every team's month (the platform last, team_id None): its detail lines rounded by the
    running-total rule and summed by the database, as `exports.team_totals` gives them; exact
    amounts summed exactly. One query, one row per team."""
    sql, params = _sql(period, None, TEAMS_SELECT)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    totals = []
    for team_id, slug, name, cost_center, *sums in rows:
        seconds, (energy_kwh, *exact), cents_ = sums[:4], sums[4:9], sums[9:]
        row = {
            "team_id": team_id,
            "team__slug": slug,
            "team__name": name,
            "team__cost_center": cost_center,
        }
        row.update(zip(TEAM_SECONDS, (int(value or 0) for value in seconds), strict=True))
        row["sum_energy_kwh"] = _from_units(energy_kwh, 6)
        row.update(zip(TEAM_EXACT, map(_from_units, exact), strict=True))
        row.update(zip(TEAM_CENTS, map(from_cents, cents_), strict=True))
        totals.append(row)
    return totals


def from_cents(value) -> Decimal:
    return Decimal(int(value or 0)).scaleb(-2)


def _from_units(value, places: int = EXACT_PLACES) -> Decimal:
    return Decimal(0) if value is None else Decimal(int(value)).scaleb(-places)


def _converters() -> list:
    """What turns the raw cursor's values into the ORM's (its converters are not run on a raw
    cursor): exact sums back to Decimals; on SQLite also days, prices and flags."""
    converters = [
        (name, _from_units)
        for name in ("exact_cost", "held_idle_cost", "sum_energy_cost", "over_quota_cost")
    ]
    converters += [("cost_before", _from_units)]
    converters += [("sum_energy_kwh", lambda value: _from_units(value, 6))]
    if connection.vendor != "postgresql":
        converters += [("day", _as_date), ("unit_price", _as_price), ("over_quota", bool)]
    return converters


def _as_date(value) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value)[:10])


PRICE_PLACES = Decimal("0.0001")


def _as_price(value) -> Decimal:
    return Decimal(str(value)).quantize(PRICE_PLACES)
