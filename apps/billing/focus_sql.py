"""FOCUS CSV rendered by PostgreSQL (`focus.focus_csv_chunks` on PostgreSQL): the database
returns each export line as its finished CSV text (its row, or in 1.3 the busy and held-idle
rows of a split line), so Python only passes the text on. The same bytes as `focus.focus_rows`
written by the csv module; the tests hold the two equal on random months and against the
stored renderings. What that takes:

- money from the running total of `exports.query` (`cost_cents` and the parts), written with
  two decimals, and Decimal(0) written "0" where `focus_rows` has it;
- GPU-hours and kWh with six decimals; floats in AllocatedMethodDetails as Python's `repr`
  writes them (`_float_micro`);
- the idle share of a split line as Python's decimal arithmetic computes it: the idle fraction
  is a 28-digit Decimal, each product is rounded to 28 significant digits, then half-even to
  cents or 1e-6 kWh (`_sig28`, `_half_even`), so a tie lands where Python's lands;
- the csv module's quoting: a field is quoted only when it holds a comma, a quote or a line
  break (`_quoted`).

What a row shares with every row of the export or of its team (constants, InvoiceId, Tags,
the allocated tags) is rendered once in Python with the csv module and handed to the query as
text. So are the powered-off GPU-days (`energy.py`, computed in Python); those no line carried,
and the month's recovery rows, follow in Python as `focus_rows` writes them.
"""

import csv
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import connection

from apps.billing import focus
from apps.billing.choices import PLATFORM_COST_CENTER, ChargeSource
from apps.billing.exports import ExportScope, adjustment_labels, tables
from apps.billing.exports.query import LINE_ORDER, _cents, _sql
from apps.teams.models import Team

RESERVATION, JOB, UNALLOCATED, ADJUSTMENT = (
    ChargeSource.RESERVATION.value, ChargeSource.JOB.value, ChargeSource.UNALLOCATED.value,
    ChargeSource.ADJUSTMENT.value,
)  # fmt: skip


# Lines fetched at once: a 1.3 line is up to two rows of about 1 kB of text.
FETCH_LINES = 500
SORT_MEMORY = "64MB"  # PostgreSQL's work_mem for the export's query


class _Echo:
    def write(self, value: str) -> str:
        return value


_WRITER = csv.writer(_Echo())


def _field(value) -> str:
    """`value` as the csv module writes it inside a row."""
    return _WRITER.writerow([value, None])[:-3]


def focus_sql_chunks(scope: ExportScope, version: str) -> Iterator[str]:
    """The FOCUS CSV of `scope` (header first) in chunks of about `tables.CHUNK_CHARS`."""
    context = focus._Context(scope, version)
    columns = focus.focus_columns(version)
    sql, params = _Query(context, version).sql()
    head = _WRITER.writerow(columns)
    carried = set()
    buffer, size = [], 0
    with _query_settings(), connection.chunked_cursor() as cursor:
        cursor.execute(sql, params)
        while batch := cursor.fetchmany(FETCH_LINES):
            if head:  # the header comes with the first line alone (`exports.csv_chunks`)
                yield head + batch[0][0]
                head, batch[0] = "", ("", batch[0][1])
            for text, off_key in batch:
                buffer.append(text)
                size += len(text)
                if off_key is not None:
                    carried.add(off_key)
            if size >= tables.CHUNK_CHARS:
                yield "".join(buffer)
                buffer, size = [], 0
    buffer.insert(0, head)  # no line: the header leads what Python writes
    for key in list(context._powered_off):
        if f"{key[0]}|{key[1].isoformat()}" in carried:
            del context._powered_off[key]
    rows = focus.powered_off_and_recovery_rows(context, version)
    for row in rows:
        buffer.append(_WRITER.writerow(list(map(row.__getitem__, columns))))
    if text := "".join(buffer):
        yield text


@contextmanager
def _query_settings():
    """The query with room for the sorts of the lines in memory (a month of 2,000 GPUs: ~30 MB
    each, which spilled to disk; 12 % faster). Sessions already run without JIT compiling (the
    settings' `with_engine_options`): its many expressions took seconds to compile, more than a
    month of 200 GPUs takes to run."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET work_mem = '{SORT_MEMORY}'")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET work_mem")


def _money(cents: str) -> str:
    """Cents (an integer) as a Decimal of two places writes them."""
    return TEXTS.get(("money", cents)) or f"(({cents}) * 0.01)::text"


def _micro_text(micro: str) -> str:
    """Millionths (an integer) as a Decimal of six places writes them."""
    return TEXTS.get(("micro", micro)) or f"(({micro}) * 0.000001)::text"


# Texts a line's rows use more than once, made once per line (the last step): (kind, figure)
# -> its column.
TEXTS = {
    ("money", "c_"): "c_text_", ("money", "hc_"): "hc_text_", ("money", "e_"): "e_text_",
    ("money", "oc_"): "oc_text_", ("money", "list_"): "list_text_",
    ("money", "c_ - hc_ - e_"): "busy_text_", ("micro", "q_"): "q_text_",
    ("micro", "kwh_"): "kwh_text_",
}  # fmt: skip


def _hours_text(seconds: str) -> str:
    """`exports.gpu_hours`: seconds as hours with six decimals (never a tie: n/3600 to six
    places ends in ninths of a millionth)."""
    return f"round(COALESCE({seconds}, 0)::numeric / 3600, 6)::text"


def _float_micro(micro: str) -> str:
    """repr(float(Decimal)) of millionths (an integer, not negative): '0.0', '1.5', '0.0001',
    '1.2e-05' (exponent notation below 1e-4)."""
    k = micro
    return (
        f"CASE WHEN {k} = 0 THEN '0.0' WHEN {k} < 10 THEN ({k})::text || 'e-06' "
        f"WHEN {k} < 100 THEN ({k}) / 10 || CASE WHEN mod({k}, 10) = 0 THEN '' "
        f"ELSE '.' || mod({k}, 10) END || 'e-05' "
        f"ELSE ({k}) / 1000000 || '.' || COALESCE(NULLIF(rtrim(lpad(mod({k}, 1000000)::text, "
        f"6, '0'), '0'), ''), '0') END"
    )


def _quoted(text: str) -> str:
    """SQL: `text` as the csv module writes a field (NULL: empty)."""
    return (
        f"COALESCE(CASE WHEN ({text}) ~ '[\",\\r\\n]' "
        f"THEN '\"' || replace({text}, '\"', '\"\"') || '\"' ELSE {text} END, '')"
    )


def _sig28(value: str) -> str:
    """SQL: a numeric (positive, or NULL) rounded to 28 significant digits (Python's decimal
    context), half-even. The magnitude is found by comparison (exact, not a logarithm), in a
    binary search over 1e-20 .. 1e12."""
    scale = _scale_of(value, list(range(12, -21, -1)))
    rounded = _half_even(value, scale)
    return f"CASE WHEN {value} IS NULL OR {value} <= 0 THEN {value} ELSE {rounded} END"


def _scale_of(value: str, powers: list[int]) -> str:
    """SQL: the decimals that keep 28 significant digits of `value`, whose magnitude is one of
    `powers` (descending; below the last: that one's)."""
    if len(powers) == 1:
        return str(27 - powers[0])
    middle = len(powers) // 2
    upper, lower = powers[:middle], powers[middle:]
    return (
        f"(CASE WHEN {value} >= 1e{upper[-1]} THEN {_scale_of(value, upper)} "
        f"ELSE {_scale_of(value, lower)} END)"
    )


def _half_even(value: str, scale: str) -> str:
    """SQL: a numeric not below zero rounded to `scale` decimals, halves to even (PostgreSQL's
    round() takes halves away from zero)."""
    shifted = f"(({value}) * power(10::numeric, {scale}))"
    return (
        f"CASE WHEN {shifted} - trunc({shifted}) = 0.5 AND mod(trunc({shifted}), 2) = 0 "
        f"THEN trunc({value}, {scale}) ELSE round({value}, {scale}) END"
    )


def _round_micro(part: str, total: str) -> str:
    """SQL: part/total in millionths, halves to even (`focus._ratio`; integers, part >= 0)."""
    quotient = f"(({part}) * 1000000 / ({total}))"
    rest = f"(({part}) * 1000000 - {quotient} * ({total}))"
    return (
        f"({quotient} + CASE WHEN 2 * {rest} > ({total}) THEN 1 "
        f"WHEN 2 * {rest} = ({total}) THEN mod({quotient}, 2) ELSE 0 END)"
    )


def _ratio(offset: str, seconds: str) -> str:
    """SQL: a share's AllocatedRatio in millionths (`_Context.ratio`)."""
    before = f"(gpu_day_before_ + {offset})"
    return (
        f"CASE WHEN gpu_day_seconds_ <= 0 THEN 0 ELSE "
        f"{_round_micro(f'{before} + {seconds}', 'gpu_day_seconds_')} - "
        f"{_round_micro(before, 'gpu_day_seconds_')} END"
    )


def _literal(value: str) -> str:
    """SQL: a string literal (the query runs with parameters, so "%" is doubled)."""
    return "'" + value.replace("'", "''").replace("%", "%%") + "'"


# The derived figures of a line, step by step (each step a subquery, so each is computed once
# per line and the later steps read it as a column).
SPLIT = f"source NOT IN ('{ADJUSTMENT}', '{UNALLOCATED}', '{JOB}') AND COALESCE(gpu_uuid, '') <> ''"
STEPS = (
    """COALESCE(sum_gpu_seconds, 0) AS s_,
    LEAST(GREATEST(COALESCE(held_idle_seconds, 0), 0), COALESCE(sum_gpu_seconds, 0)) AS i_,
    (unit_price * 10000)::bigint AS pu_,
    COALESCE(cost_cents, 0)::bigint AS c_, COALESCE(held_idle_cents, 0)::bigint AS hc_,
    COALESCE(energy_cents, 0)::bigint AS e_, COALESCE(over_quota_cents, 0)::bigint AS oc_,
    COALESCE(sum_energy_kwh, 0)::bigint AS kwh_,
    COALESCE(gpu_day_before, 0)::bigint AS gpu_day_before_,
    COALESCE(gpu_day_seconds, 0)::bigint AS gpu_day_seconds_""",
    # A booking's line of a GPU with held-idle time is split (`focus._shares`); its idle
    # fraction as Decimal(idle) / Decimal(seconds) gives it (28 significant digits).
    f"""(s_ * 1000000 + 1800) / 3600 AS q_, (i_ * 1000000 + 1800) / 3600 AS qi_,
    ({SPLIT} AND i_ > 0) AS split_,
    CASE WHEN {SPLIT} AND i_ > 0 THEN i_::numeric(60, 40) / s_ END AS exact_fraction_""",
    f"""{_sig28("exact_fraction_")} AS f_,
    ({_cents("q_ * pu_")})::bigint AS list_, ({_cents("qi_ * pu_")})::bigint AS ilist_""",
    "(e_ * 0.01) * f_ AS exact_idle_energy_, (kwh_ * 0.000001) * f_ AS exact_idle_kwh_",
    f"{_sig28('exact_idle_energy_')} AS idle_energy_, {_sig28('exact_idle_kwh_')} AS idle_kwh_",
    f"""LEAST(({_half_even("idle_energy_", "2")}) * 100, e_)::bigint AS ie_,
    (({_half_even("idle_kwh_", "6")}) * 1000000)::bigint AS ik_""",
)


def _texts_step() -> str:
    texts = [
        f"(({figure}) * {'0.01' if kind == 'money' else '0.000001'})::text AS {column}"
        for (kind, figure), column in TEXTS.items()
    ]
    return ", ".join(texts)


def _stepped(source: str, steps: tuple[str, ...]) -> str:
    """SQL: `source` (a subquery) with the columns of every step added."""
    template = "SELECT step_{number}.*, {columns} FROM ({source}) step_{number} OFFSET 0"
    for number, columns in enumerate(steps):
        source = template.format(number=number, columns=columns, source=source)
    return source


# No ORDER BY around the steps: they only add columns to the ordered lines, row by row, so the
# lines leave in the order of `lines` (sorting the finished text again would cost a sort of
# every byte of the export).
SELECT = """
SELECT {render} AS line_, {off_key} AS off_key_
FROM ({stepped}) stepped
"""
LINES = """
SELECT rounded.*, {unallocated_before} AS unallocated_before_,
       {teams}::jsonb -> COALESCE(team_id, -1)::text AS team_
FROM rounded
{where}
ORDER BY {order}
"""
# The columns of a line's team (`_Query._team_columns`) and its powered-off figures.
TEAM_COLUMNS = (
    "sub_account", "sub_account_id", "invoice", "name", "type", "tags", "unit_path",
    "busy_tags", "idle_tags", "job_tags",
)  # fmt: skip
LOOKUPS = ", ".join(f"team_ ->> '{name}' AS tc_{name}" for name in TEAM_COLUMNS) + ", {off} AS off_"
OFF_LOOKUP = (
    "CASE WHEN source = 'unallocated' AND unallocated_before_ = 0 "
    "THEN {off}::jsonb -> (gpu_uuid || '|' || day) END"
)
UNALLOCATED_BEFORE = (
    "COUNT(*) FILTER (WHERE source = 'unallocated') OVER (PARTITION BY gpu_id, day "
    "ORDER BY {order} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
)


class _Query:
    """The query of one export: its SQL text and parameters."""

    def __init__(self, context, version: str) -> None:
        self.context = context
        self.version = version

    def constant(self, value) -> str:
        """SQL: `value` as the csv module writes it."""
        return _literal(_field(value))

    def sql(self) -> tuple[str, list]:
        scope, off = self.context.scope, self.context._powered_off
        lines = LINES.format(
            teams=_literal(json.dumps(self._team_columns())),
            unallocated_before=UNALLOCATED_BEFORE.format(order=LINE_ORDER) if off else "0",
            where="" if scope.team_id is None else "WHERE team_id = %s",
            order=LINE_ORDER,
        )
        lookup = (
            OFF_LOOKUP.format(off=_literal(json.dumps(_off_figures(off)))) if off else "NULL::jsonb"
        )
        # The lookups join the first step (both read only the line's own columns).
        steps = (
            f"{LOOKUPS.format(off=lookup)}, {self._charge_periods()},\n    {STEPS[0]}",
            *STEPS[1:],
            _texts_step(),
        )
        off_key = (
            "CASE WHEN off_ IS NOT NULL THEN gpu_uuid || '|' || day END" if off else "NULL::jsonb"
        )
        select = SELECT.replace(
            "{stepped}", _stepped(lines, steps).replace("{", "{{").replace("}", "}}")
        )
        sql, params = _sql(scope.period, None, select, render=self._render(), off_key=off_key)
        return sql, [*params, *([] if scope.team_id is None else [scope.team_id])]

    def _charge_periods(self) -> str:
        """SQL: ChargePeriodStart and ChargePeriodEnd of a line's day (`_Context.charge_period`)
        looked up in the month's days."""
        context = self.context
        first = context.scope.period.month
        days = [
            first + timedelta(days=number)
            for number in range((context.period_end.date() - first).days)
        ]
        periods = [context.charge_period[day] for day in days]
        index = f"(day - DATE '{first.isoformat()}' + 1)"
        starts = ", ".join(_literal(start) for start, _ in periods)
        ends = ", ".join(_literal(end) for _, end in periods)
        return (
            f"(ARRAY[{starts}])[{index}] AS charge_start_, (ARRAY[{ends}])[{index}] AS charge_end_"
        )

    def _team_columns(self) -> dict[str, dict]:
        context = self.context
        teams = [(team.pk, team.slug, team.name, team.cost_center) for team in Team.objects.all()]
        result = {}
        for team_id, slug, name, cost_center in [*teams, (None, None, None, None)]:
            sub_account = slug or PLATFORM_COST_CENTER
            columns = context.team_columns[team_id, sub_account, name, cost_center]
            result[str(-1 if team_id is None else team_id)] = {
                "sub_account": sub_account,
                "sub_account_id": _field(sub_account),
                "invoice": _field(columns["InvoiceId"]),
                "name": _field(columns["SubAccountName"]),
                "type": _field(columns["SubAccountType"]),
                "tags": _field(columns["Tags"]),
                "unit_path": _field(columns["x_UnitPath"]),
                "busy_tags": _field(context.allocated_tags[sub_account, focus.BUSY]),
                "idle_tags": _field(context.allocated_tags[sub_account, focus.HELD_IDLE]),
                "job_tags": _field(context.allocated_tags[sub_account, focus.JOB]),
            }
        return result

    def _render(self) -> str:
        """SQL: the CSV text of a line (its rows, each ending in CRLF)."""
        if self.version == focus.FOCUS_1_2:
            return (
                f"CASE WHEN source = '{ADJUSTMENT}' THEN {self._row(self._adjustment())} "
                f"ELSE {self._row(self._usage())} END"
            )
        whole = {
            UNALLOCATED: self._row(self._share(focus.UNALLOCATED, _whole_share())),
            JOB: self._row(self._share(focus.JOB, _whole_share())),
        }
        busy, idle = _split_shares()
        return (
            f"CASE WHEN source = '{ADJUSTMENT}' THEN {self._row(self._adjustment())} "
            f"WHEN gpu_uuid IS NULL THEN {self._row(self._usage())} "
            f"WHEN source = '{UNALLOCATED}' THEN {whole[UNALLOCATED]} "
            f"WHEN source = '{JOB}' THEN {whole[JOB]} "
            f"WHEN NOT split_ THEN {self._row(self._share(focus.BUSY, _whole_share()))} "
            f"ELSE CASE WHEN s_ - i_ > 0 OR c_ - hc_ - ie_ <> 0 "
            f"THEN {self._row(self._share(focus.BUSY, busy))} ELSE '' END "
            f"|| {self._row(self._share(focus.HELD_IDLE, idle))} END"
        )

    def _row(self, columns: dict) -> str:
        names = focus.focus_columns(self.version)
        # concat_ws skips NULLs: every field is made text (empty for None) first.
        fields = ", ".join(f"COALESCE({columns[name]}, '')" for name in names)
        return f"(concat_ws(',', {fields}) || E'\\r\\n')"

    def _base(self) -> dict:
        """The columns of `focus._base_row` every kind of line has alike."""
        context, constant = self.context, self.constant
        columns = {name: constant(value) for name, value in context.constant.items()}
        columns.update({name: constant(value) for name, value in context.new_in_version.items()})
        period_end = context.period_end.date().isoformat()
        columns.update(
            {
                "InvoiceId": "tc_invoice",
                "SubAccountId": "tc_sub_account_id",
                "SubAccountName": "tc_name",
                "SubAccountType": "tc_type",
                "Tags": "tc_tags",
                "x_UnitPath": "tc_unit_path",
                "BilledCost": _money("c_"),
                "ContractedCost": _money("c_"),
                "EffectiveCost": _money("c_"),
                "ChargePeriodStart": "COALESCE(charge_start_, to_char(day, 'YYYY-MM-DD') "
                "|| 'T00:00:00Z')",
                "ChargePeriodEnd": "COALESCE(charge_end_, to_char(LEAST(day + 1, "
                f"DATE '{period_end}'), 'YYYY-MM-DD') || 'T00:00:00Z')",
                "ResourceId": _quoted("gpu_uuid"),
                "ResourceName": "CASE WHEN gpu_uuid <> '' THEN "
                + _quoted(
                    "COALESCE(node_hostname, 'None') || '/gpu' || COALESCE(gpu_index::text, 'None')"
                )
                + " END",
                "ResourceType": "CASE WHEN gpu_uuid <> '' THEN 'GPU' END",
                "SkuId": _quoted("model_name"),
                "SkuMeter": f"CASE WHEN model_name <> '' THEN {constant(focus.SKU_METER)} END",
                "SkuPriceId": "rate_card_id::text",
                "x_BusyGpuHours": _hours_text("sum_busy_seconds"),
                "x_IdleGpuHours": _hours_text(
                    f"CASE WHEN source = '{UNALLOCATED}' THEN s_ ELSE held_idle_seconds END"
                ),
                "x_EnergyKwh": _micro_text("kwh_"),
                "x_ReservationId": f"CASE WHEN source = '{RESERVATION}' THEN source_id::text END",
                "x_JobId": f"CASE WHEN source = '{JOB}' THEN source_id::text END",
                "x_OverQuota": "CASE WHEN over_quota THEN 'true' ELSE 'false' END",
                "x_LineType": f"CASE WHEN source = '{ADJUSTMENT}' THEN 'adjustment' "
                "ELSE 'usage' END",
                "x_BusyCost": f"CASE WHEN source IN ('{RESERVATION}', '{JOB}') "
                f"THEN {_money('c_ - hc_ - e_')} ELSE '0' END",
                "x_HeldIdleCost": _money("hc_"),
                "x_OverQuotaCost": _money("oc_"),
                "x_EnergyCost": _money("e_"),
                "x_PoweredOffGpuHours": "COALESCE(off_ ->> 0, '0')",
                "x_EnergySavedKwh": "COALESCE(off_ ->> 1, '0')",
            }
        )
        return columns

    def _adjustment(self) -> dict:
        columns = self._base()
        columns.update({name: self.constant(v) for name, v in focus.ADJUSTMENT_COLUMNS.items()})
        labels = _literal(json.dumps({str(key): label for key, label in self._labels().items()}))
        columns["ChargeDescription"] = _quoted(
            f"COALESCE({labels}::jsonb ->> source_id::text, 'Adjustment #' || source_id)"
        )
        columns["ListCost"] = _money("c_")
        return columns

    def _labels(self) -> dict:
        return adjustment_labels(self.context.scope.period)

    def _usage(self) -> dict:
        columns = self._base()
        columns.update({name: self.constant(v) for name, v in focus.USAGE_COLUMNS.items()})
        columns["ChargeDescription"] = _quoted(_description())
        columns["ConsumedQuantity"] = columns["PricingQuantity"] = _micro_text("q_")
        price = "CASE WHEN unit_price = 0 THEN '0' ELSE unit_price::text END"
        columns["ContractedUnitPrice"] = columns["ListUnitPrice"] = price
        columns["ListCost"] = _money("list_")
        return columns

    def _share(self, name: str, share: dict) -> dict:
        """`focus._allocated_row`: the 1.3 row of one share of a usage line of a GPU."""
        columns = self._usage()
        cost, quantity = share["cost"], share["quantity"]
        columns["BilledCost"] = columns["ContractedCost"] = columns["EffectiveCost"] = _money(cost)
        columns["ListCost"] = _money(share["list_cost"])
        columns["ConsumedQuantity"] = columns["PricingQuantity"] = _micro_text(quantity)
        suffix = {focus.BUSY: ", busy share", focus.HELD_IDLE: ", held idle share"}.get(name, "")
        columns["ChargeDescription"] = _quoted(f"{_description()} || '{suffix}'")
        columns["AllocatedMethodId"] = self.constant(focus.ALLOCATION_METHOD)
        ratio = _float_micro(_ratio(share["offset"], share["seconds"]))
        # focus._method_details as the csv module quotes it (it holds commas and quotes)
        columns["AllocatedMethodDetails"] = (
            '\'"{""Elements"": [{""AllocatedRatio"": \' || '
            f'{ratio} || \', ""UsageUnit"": ""GPU-Hours"", ""UsageQuantity"": \' || '
            f'{_float_micro(quantity)} || \'}}], ""x_Share"": ""{name}""}}"\''
        )
        columns["x_EnergyKwh"] = _micro_text(share["energy_kwh"])
        columns["x_EnergyCost"] = _money(share["energy_cost"])
        columns["x_BusyCost"] = share["busy_cost"]
        columns["x_HeldIdleCost"] = share["held_idle_cost"]
        columns["x_OverQuotaCost"] = f"CASE WHEN over_quota THEN {_money(cost)} ELSE '0' END"
        if name == focus.UNALLOCATED:
            columns["AllocatedTags"] = self.constant(
                self.context.allocated_tags[None, focus.UNALLOCATED]
            )
            return columns
        kind = "job" if name == focus.JOB else "reservation"
        held_idle = name == focus.HELD_IDLE
        columns["AllocatedResourceId"] = _quoted(
            f"'{kind}/' || source_id" + (" || '/held-idle'" if held_idle else "")
        )
        columns["AllocatedResourceName"] = _quoted(
            f"tc_sub_account || ' {kind} #' || source_id"
            + (" || ' (held idle)'" if held_idle else "")
        )
        columns["AllocatedTags"] = {
            focus.JOB: "tc_job_tags",
            focus.BUSY: "tc_busy_tags",
            focus.HELD_IDLE: "tc_idle_tags",
        }[name]
        if name in (focus.BUSY, focus.HELD_IDLE):
            if held_idle:
                columns["x_BusyGpuHours"] = "'0'"
                columns["x_IdleGpuHours"] = _micro_text(quantity)
            else:
                columns["x_IdleGpuHours"] = "'0'"
            columns["CapacityReservationId"] = "'reservation/' || source_id"
            columns["CapacityReservationStatus"] = "'Unused'" if held_idle else "'Used'"
        return columns


def _off_figures(off: dict) -> dict[str, list[str]]:
    """The powered-off GPU-days handed to the query ("uuid|day": hours and kWh saved, as the
    csv module writes them)."""
    return {
        f"{uuid}|{day.isoformat()}": [_field(figures.gpu_hours), _field(figures.energy_saved_kwh)]
        for (uuid, day), figures in off.items()
    }


def _description() -> str:
    """SQL: `exports.charge_description` of a usage line (a missing model reads "None")."""
    model = "COALESCE(model_name, 'None')"
    return (
        f"CASE source WHEN '{RESERVATION}' THEN {model} || ' GPU reservation #' || source_id "
        f"WHEN '{JOB}' THEN {model} || ' GPU job #' || source_id "
        f"WHEN '{UNALLOCATED}' THEN {model} || ' unallocated capacity' "
        "ELSE 'Adjustment #' || source_id END"
    )


def _whole_share() -> dict:
    """A line's one share (`focus._shares`, unsplit): its own figures."""
    return {
        "seconds": "s_", "offset": "0", "quantity": "q_", "cost": "c_", "list_cost": "list_",
        "energy_kwh": "kwh_", "energy_cost": "e_",
        "busy_cost": f"CASE WHEN source IN ('{RESERVATION}', '{JOB}') "
        f"THEN {_money('c_ - hc_ - e_')} ELSE '0' END",
        "held_idle_cost": _money("hc_"),
    }  # fmt: skip


def _split_shares() -> tuple[dict, dict]:
    """A booking's line split: its busy share (what is left) and its held-idle share."""
    idle = {
        "seconds": "i_", "offset": "(s_ - i_)", "quantity": "qi_", "cost": "(hc_ + ie_)",
        "list_cost": "ilist_", "energy_kwh": "ik_", "energy_cost": "ie_", "busy_cost": "'0'",
        "held_idle_cost": _money("hc_"),
    }  # fmt: skip
    busy = {
        "seconds": "(s_ - i_)", "offset": "0", "quantity": "(q_ - qi_)",
        "cost": "(c_ - hc_ - ie_)", "list_cost": "(list_ - ilist_)",
        "energy_kwh": "(kwh_ - ik_)", "energy_cost": "(e_ - ie_)",
        "busy_cost": _money("c_ - hc_ - e_"), "held_idle_cost": "'0'",
    }  # fmt: skip
    return busy, idle
