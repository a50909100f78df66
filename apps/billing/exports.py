"""Chargeback exports (CSV, JSON, XLSX; FinOps FOCUS in `focus.py`) read straight from the ledger.

Rounding rule: one owner. The ledger keeps each charge at full precision. The finest line of
the chargeback, the detail line (team x day x GPU model x source x GPU), is the only place money
is rounded: `export_lines` rounds each detail line's cost and its parts (busy, held idle, over
quota, energy; an adjustment is a line of its own) once, and every coarser figure (summary
lines, the page's team totals, statements, FOCUS rows) is a sum of those rounded parts, never a
sum of exact values rounded again. So a part reads the same in every format and the statement.

A line's cost is rounded half-even with a running total: walking the detail lines in the
export's fixed order (team, day, GPU model, source, ...), a line's cost is round(total up to and
including it) minus round(total before it). So every line is within a cent of its exact cost,
and any team's lines, the platform's lines and all lines together sum exactly to their rounded
exact totals. The parts come from the same running total: held idle and energy lie side by
side inside the line, each rounded as round(total before it + part) minus round(total before
it), so they never exceed the line and the busy part (what is left of a booking's or job's
line) is never negative; over quota overlaps them and is rounded on its own the same way. An
adjustment is a line of its own, labelled with the month it corrects. Exact totals come from
the database with `ExactSum`, so both databases (PostgreSQL, and SQLite, which keeps decimals
as floats) give the same cents.

Exports stream: rows come from the database in chunks and leave as they are written, so memory
stays bounded whatever the period's size (XLSX is written in openpyxl's write-only mode to a
temporary file).
"""

import csv
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from django.conf import settings
from django.db.models import Case, F, IntegerField, Sum, Value, When
from django.db.models.functions import TruncDate

from apps.billing.choices import PLATFORM_COST_CENTER, ChargeSource, is_showback
from apps.billing.invoices import invoice_id
from apps.billing.models import Adjustment, BillingPeriod, LedgerEntry
from apps.billing.money import ExactSum
from apps.billing.periods import month_bounds

CENT = Decimal("0.01")
HOURS = Decimal(3600)
QUANTITY_PLACES = Decimal("0.000001")
DETAIL = "detail"
SUMMARY = "summary"


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


def gpu_hours(seconds) -> Decimal:
    return (Decimal(seconds or 0) / HOURS).quantize(QUANTITY_PLACES)


class RunningRounder:
    """Rounds a sequence of exact amounts to cents so that the rounded amounts always add up to
    the rounded running total (see the module docstring)."""

    def __init__(self, carried: Decimal = Decimal(0)) -> None:
        self.exact = carried
        self.rounded = cents(carried)

    def take(self, amount: Decimal, parts: dict | None = None) -> Decimal:
        """The rounded amount; each of `parts` (components of the amount) is replaced in place
        by its rounded value, taken from the same running total (never above the amount)."""
        for name, part in (parts or {}).items():
            parts[name] = cents(self.exact + (part or 0)) - self.rounded
        self.exact += amount
        previous, self.rounded = self.rounded, cents(self.exact)
        return self.rounded - previous

    def take_stacked(self, amount: Decimal, stacked: dict, overlapping: dict) -> Decimal:
        """As `take`, for parts of two kinds. `stacked` parts lie side by side inside the
        amount (held idle, then energy): each is rounded from the running total after the ones
        before it, so together they never exceed the amount and what is left of it (the busy
        part) is never negative. `overlapping` parts (over quota) are rounded each on its own."""
        cursor = self.exact
        for name, part in stacked.items():
            stacked[name] = cents(cursor + (part or 0)) - cents(cursor)
            cursor += part or 0
        return self.take(amount, overlapping)


@dataclass(frozen=True)
class ExportScope:
    period: BillingPeriod
    team_id: int | None = None  # None: every team and the platform
    level: str = SUMMARY

    @property
    def draft(self) -> bool:
        return not self.period.is_closed


def _held_idle_seconds():
    return Case(
        When(source=ChargeSource.RESERVATION, then=F("gpu_seconds") - F("busy_seconds")),
        default=0,
        output_field=IntegerField(),
    )


def _money_sums() -> dict:
    """Exact sums of a group of ledger rows (see `ExactSum`)."""
    return {
        "exact_cost": ExactSum("cost"),
        "held_idle_cost": ExactSum("idle_cost"),
        "sum_energy_cost": ExactSum("energy_cost"),
        "over_quota_cost": ExactSum(
            Case(When(over_quota=True, then=F("cost")), default=Value(Decimal(0)))
        ),
    }


GROUP_FIELDS = {
    SUMMARY: ["team_id", "team__slug", "team__name", "team__cost_center", "day", "gpu_model__name"],
    DETAIL: [
        "team_id", "team__slug", "team__name", "team__cost_center", "day", "gpu_model__name",
        "source", "source_id", "gpu__uuid", "gpu__node__hostname", "gpu__index", "over_quota",
        "unit_price", "rate_card_id",
    ],
}  # fmt: skip


def team_order():
    return [F("team__slug").asc(nulls_last=True)]


def _lines_queryset(scope: ExportScope):
    """The detail lines (the finest grouping every coarser figure is summed from)."""
    entries = LedgerEntry.objects.filter(period_id=scope.period.pk)
    if scope.team_id is not None:
        entries = entries.filter(team_id=scope.team_id)
    order = [*team_order(), "day", F("gpu_model__name").asc(nulls_first=True)]
    order += ["source", "source_id", F("gpu__uuid").asc(nulls_first=True), "over_quota"]
    return (
        entries.annotate(day=TruncDate("slice_start", tzinfo=UTC))
        .values(*GROUP_FIELDS[DETAIL])
        .annotate(
            sum_gpu_seconds=Sum("gpu_seconds"),
            sum_busy_seconds=Sum("busy_seconds"),
            held_idle_seconds=Sum(_held_idle_seconds()),
            sum_energy_kwh=ExactSum("energy_kwh", places=6),
            over_quota_seconds=Sum(Case(When(over_quota=True, then=F("gpu_seconds")), default=0)),
            **_money_sums(),
        )
        .order_by(*order)
    )


def _carried_before(scope: ExportScope) -> Decimal:
    """Exact cost of the teams ordered before the filtered team, so its lines round exactly as
    they do in the export of all teams."""
    if scope.team_id is None:
        return Decimal(0)
    totals = (
        LedgerEntry.objects.filter(period_id=scope.period.pk)
        .values("team_id", "team__slug")
        .annotate(total=ExactSum("cost"))
        .order_by(*team_order())
    )
    carried = Decimal(0)
    for row in totals:
        if row["team_id"] == scope.team_id:
            break
        carried += row["total"]
    return carried


def export_lines(scope: ExportScope) -> Iterator[dict]:
    """The export's lines in order, each with its exact and its rounded cost and parts. Detail
    lines are rounded here (the one rounding step); a summary line is the sum of its detail
    lines' rounded figures."""
    rounder = RunningRounder(_carried_before(scope))
    labels = adjustment_labels(scope.period)
    lines = (
        _round_line(rounder, row, labels)
        for row in _lines_queryset(scope).iterator(chunk_size=5000)
    )
    if scope.level == DETAIL:
        yield from lines
    else:
        yield from _merged(lines, _summary_key, SUMMARY_FIELDS)


def team_totals(period: BillingPeriod) -> list[dict]:
    """Per team (platform last): GPU-hours, busy/idle hours, and the cost and its parts, each
    the sum of the team's rounded detail lines (so every export sums to these)."""
    rows = _merged(
        export_lines(ExportScope(period, None, DETAIL)),
        lambda line: line["team_id"],
        ("team_id", "team__slug", "team__name", "team__cost_center", "sub_account"),
    )
    result = []
    for row in rows:
        row["gpu_hours"] = gpu_hours(row["sum_gpu_seconds"])
        row["busy_gpu_hours"] = gpu_hours(row["sum_busy_seconds"])
        row["held_idle_gpu_hours"] = gpu_hours(row["held_idle_seconds"])
        row["over_quota_gpu_hours"] = gpu_hours(row["over_quota_seconds"])
        result.append(row)
    return result


# The parts of a line's cost a reader sees; each rounded once, on the detail line.
COMPONENTS = ("held_idle_cost", "over_quota_cost", "energy_cost")
PARTS = ("busy_cost", *COMPONENTS, "adjustment_cost")
USAGE, ADJUSTMENT = "usage", "adjustment"
_SUMMED = (
    "sum_gpu_seconds", "sum_busy_seconds", "held_idle_seconds", "over_quota_seconds",
    "sum_energy_kwh", "exact_cost", "cost", *PARTS, *(f"exact_{name}" for name in COMPONENTS),
)  # fmt: skip
SUMMARY_FIELDS = (
    *GROUP_FIELDS[SUMMARY], "sub_account", "line_type", "description",
)  # fmt: skip


def _summary_key(line: dict) -> tuple:
    """Detail lines of one summary line: team x day x GPU model; each adjustment stays a line
    of its own, so its label survives."""
    adjustment = line["source_id"] if line["line_type"] == ADJUSTMENT else None
    return (line["team_id"], line["day"], line["gpu_model__name"], adjustment)


def _merged(lines: Iterator[dict], key, fields) -> Iterator[dict]:
    """Consecutive lines with the same key added up (the `fields` of the first line kept)."""
    current, current_key = None, None
    for line in lines:
        line_key = key(line)
        if current is not None and line_key == current_key:
            for name in _SUMMED:
                current[name] += line[name] or 0
            continue
        if current is not None:
            yield current
        current, current_key = {name: line.get(name) for name in fields}, line_key
        current.update({name: line[name] or 0 for name in _SUMMED})
        if current.get("line_type") == USAGE:
            current["description"] = usage_description(current)
    if current is not None:
        yield current


def _round_line(rounder: RunningRounder, row: dict, labels: dict[int, str]) -> dict:
    """Round a detail line's cost and its parts with the running total (module docstring)."""
    stacked = {"held_idle_cost": row["held_idle_cost"], "energy_cost": row["sum_energy_cost"]}
    overlapping = {"over_quota_cost": row["over_quota_cost"]}
    row.update({f"exact_{name}": part or Decimal(0) for name, part in stacked.items()})
    row["exact_over_quota_cost"] = row["over_quota_cost"] or Decimal(0)
    row["cost"] = rounder.take_stacked(row["exact_cost"], stacked, overlapping)
    row.update(stacked)
    row.update(overlapping)
    source = row["source"]
    used = source in (ChargeSource.RESERVATION, ChargeSource.JOB)
    # Busy: GPU time used (a booking's busy share, a job), energy and held idle apart.
    busy = row["cost"] - row["held_idle_cost"] - row["energy_cost"]
    row["busy_cost"] = busy if used else Decimal(0)
    is_adjustment = source == ChargeSource.ADJUSTMENT
    row["adjustment_cost"] = row["cost"] if is_adjustment else Decimal(0)
    row["line_type"] = ADJUSTMENT if is_adjustment else USAGE
    row["sub_account"] = row["team__slug"] or PLATFORM_COST_CENTER
    row["description"] = (
        labels.get(row["source_id"], f"Adjustment #{row['source_id']}")
        if is_adjustment
        else charge_description(row)
    )
    return row


def adjustment_label(adjustment: Adjustment) -> str:
    """How every export and the statement name an adjustment: the month it corrects and why."""
    if adjustment.corrects_period_id:
        return f"Adjustment for {adjustment.corrects_period.month:%Y-%m}: {adjustment.reason}"
    return f"Adjustment: {adjustment.reason}"


def adjustment_labels(period: BillingPeriod) -> dict[int, str]:
    """{adjustment id: label} of the adjustments booked in the period."""
    if period.pk is None:
        return {}
    booked = Adjustment.objects.filter(period_id=period.pk).select_related("corrects_period")
    return {adjustment.pk: adjustment_label(adjustment) for adjustment in booked}


def charge_description(line: dict) -> str:
    """What a detail usage line charges for, in words."""
    source, model = line["source"], line["gpu_model__name"]
    if source == ChargeSource.RESERVATION:
        return f"{model} GPU reservation #{line['source_id']}"
    if source == ChargeSource.JOB:
        return f"{model} GPU job #{line['source_id']}"
    if source == ChargeSource.UNALLOCATED:
        return f"{model} unallocated capacity"
    return f"Adjustment #{line['source_id']}"


def usage_description(line: dict) -> str:
    """What a summary usage line charges for: the team's time on one GPU model that day."""
    return f"{line['gpu_model__name'] or 'GPU'} GPU time"


# ---- CSV / JSON ------------------------------------------------------------------------------

MONEY_COLUMNS = ("cost", "busy_cost", *COMPONENTS, "adjustment_cost")


def table_columns(level: str, *, showback: bool) -> list[str]:
    columns = ["period", "day", "team", "cost_center", "line_type", "description", "gpu_model"]
    if level == DETAIL:
        columns += ["source", "source_id", "gpu_uuid", "node", "gpu_index", "over_quota"]
        columns += [] if showback else ["unit_price"]
    columns += ["gpu_hours", "busy_gpu_hours", "held_idle_gpu_hours", "over_quota_gpu_hours"]
    columns += ["energy_kwh"]
    columns += [] if showback else [*MONEY_COLUMNS, "currency"]
    return [*columns, "draft"]


def table_rows(scope: ExportScope) -> Iterator[dict]:
    showback = is_showback()
    columns = table_columns(scope.level, showback=showback)
    for line in export_lines(scope):
        row = {
            "period": f"{scope.period.month:%Y-%m}",
            "day": line["day"].isoformat(),
            "team": line["sub_account"],
            "cost_center": line["team__cost_center"] or line["sub_account"],
            "line_type": line["line_type"],
            "description": line["description"],
            "gpu_model": line["gpu_model__name"] or "",
            "source": line.get("source", ""),
            "source_id": line.get("source_id", ""),
            "gpu_uuid": line.get("gpu__uuid") or "",
            "node": line.get("gpu__node__hostname") or "",
            "gpu_index": "" if line.get("gpu__index") is None else line["gpu__index"],
            "over_quota": flag(line["over_quota"]) if "over_quota" in line else "",
            "unit_price": line.get("unit_price", ""),
            "gpu_hours": gpu_hours(line["sum_gpu_seconds"]),
            "busy_gpu_hours": gpu_hours(line["sum_busy_seconds"]),
            "held_idle_gpu_hours": gpu_hours(line["held_idle_seconds"]),
            "over_quota_gpu_hours": gpu_hours(line["over_quota_seconds"]),
            "energy_kwh": line["sum_energy_kwh"],
            **{name: line[name] for name in MONEY_COLUMNS},
            "currency": settings.BILLING_CURRENCY,
            "draft": flag(scope.draft),
        }
        yield {name: row[name] for name in columns}
    if not showback:
        yield from _recovery_rows(scope, columns)


def _recovery_rows(scope: ExportScope, columns: list[str]) -> Iterator[dict]:
    """The month's platform-cost recovery lines (`recovery.recovery_entries`; none under the
    default `keep`): each team's share, and the platform giving the total back."""
    from apps.billing.recovery import RECOVERY_LINE, recovery_entries

    last_day = month_bounds(scope.period.month)[1].date() - timedelta(days=1)
    for entry in recovery_entries(scope.period, scope.team_id):
        team = entry.team
        row = dict.fromkeys(columns, "") | {
            "period": f"{scope.period.month:%Y-%m}",
            "day": last_day.isoformat(),
            "team": team.slug if team else PLATFORM_COST_CENTER,
            "cost_center": (team.cost_center or team.slug) if team else PLATFORM_COST_CENTER,
            "line_type": RECOVERY_LINE,
            "description": entry.description,
            **{name: Decimal(0) for name in MONEY_COLUMNS if name in columns},
            "cost": entry.amount,
            "currency": settings.BILLING_CURRENCY,
            "draft": flag(scope.draft),
        }
        for name in ("gpu_hours", "busy_gpu_hours", "held_idle_gpu_hours",
                     "over_quota_gpu_hours", "energy_kwh"):  # fmt: skip
            row[name] = Decimal(0)
        yield {name: row[name] for name in columns}


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_chunks(header: list[str], rows: Iterator[dict]) -> Iterator[str]:
    """CSV text, one line per chunk (None is written as an empty field). The header comes with
    the first row, so the first chunk has run the query (portal.downloads)."""
    writer = csv.writer(_Echo())
    pending = writer.writerow(header)
    for row in rows:
        yield pending + writer.writerow(list(map(row.__getitem__, header)))
        pending = ""
    if pending:
        yield pending


def flag(value: bool) -> str:
    return "true" if value else "false"


def json_chunks(scope: ExportScope, rows: Iterator[dict]) -> Iterator[str]:
    head = {
        "period": f"{scope.period.month:%Y-%m}",
        "status": scope.period.status,
        "draft": scope.draft,
        "level": scope.level,
        "currency": settings.BILLING_CURRENCY,
    }
    # The opening comes with the first row, so the first chunk has run the query.
    opening = json.dumps(head)[:-1] + ', "rows": ['
    for row in rows:
        yield opening + json.dumps(row, default=str)
        opening = ","
    yield ("" if opening == "," else opening) + "]}"


# ---- XLSX ------------------------------------------------------------------------------------

TOTAL_LABEL = "Total"
HOURS_FORMAT = "#,##0.00"
ENERGY_FORMAT = "#,##0.000"
DAY_FORMAT = "yyyy-mm-dd"
MONEY_COLUMN_NAMES = frozenset(MONEY_COLUMNS) | {"unit_price"}
QUANTITY_FORMATS = {
    "gpu_hours": HOURS_FORMAT,
    "busy_gpu_hours": HOURS_FORMAT,
    "held_idle_gpu_hours": HOURS_FORMAT,
    "over_quota_gpu_hours": HOURS_FORMAT,
    "energy_kwh": ENERGY_FORMAT,
}
WIDTHS = {
    "day": 12, "team": 18, "cost_center": 16, "line_type": 12, "description": 44,
    "gpu_model": 16, "invoice_id": 28,
}  # fmt: skip


def money_format(currency: str) -> str:
    """Thousands separators, two decimals and the currency code (negative credits keep it)."""
    return f'#,##0.00 "{currency}";-#,##0.00 "{currency}"'


class _Sheet:
    """A write-only worksheet laid out for finance: widths set per column, the header frozen,
    an autofilter over the data, number formats per column, and a totals row of SUM formulas
    under every summed column."""

    def __init__(self, workbook, title: str, columns: list[str], summed: list[str]) -> None:
        from openpyxl.utils import get_column_letter

        self.sheet = workbook.create_sheet(title)
        self.columns, self.summed = columns, summed
        self.letters = {name: get_column_letter(i + 1) for i, name in enumerate(columns)}
        self.formats = _column_formats(columns)
        for name, letter in self.letters.items():
            # Write-only sheets take widths before the first row, so they follow the column's
            # kind rather than its longest value.
            width = WIDTHS.get(name, 16 if name in self.formats else 12)
            self.sheet.column_dimensions[letter].width = max(width, len(name) + 2)
        self.sheet.freeze_panes = "A2"
        self.rows = 0
        self._append([self._cell(name, bold=True) for name in columns])

    def _cell(self, value, *, number_format: str | None = None, bold: bool = False):
        from openpyxl.cell import WriteOnlyCell
        from openpyxl.styles import Font

        cell = WriteOnlyCell(self.sheet, value=value)
        if number_format:
            cell.number_format = number_format
        if bold:
            cell.font = Font(bold=True)
        return cell

    def _append(self, cells: list) -> None:
        self.sheet.append(cells)
        self.rows += 1

    def add(self, values: dict) -> None:
        self._append(
            [
                self._cell(_xlsx_value(name, values[name]), number_format=self.formats.get(name))
                for name in self.columns
            ]
        )

    def add_formula_row(self, label_column: str, formulas: dict[str, str]) -> None:
        cells = []
        for name in self.columns:
            value = TOTAL_LABEL if name == label_column else formulas.get(name)
            cells.append(self._cell(value, number_format=self.formats.get(name), bold=True))
        self._append(cells)

    def close(self, label_column: str) -> None:
        """The totals row, and the autofilter over header and data (not the totals)."""
        last = self.rows
        self.sheet.auto_filter.ref = f"A1:{self.letters[self.columns[-1]]}{max(last, 1)}"
        formulas = {
            name: f"=SUM({self.letters[name]}2:{self.letters[name]}{last})" for name in self.summed
        }
        self.add_formula_row(label_column, formulas)


def _column_formats(columns: list[str]) -> dict[str, str]:
    money = money_format(settings.BILLING_CURRENCY)
    formats = {"day": DAY_FORMAT}
    for name in columns:
        if name in MONEY_COLUMN_NAMES:
            formats[name] = money
        elif name in QUANTITY_FORMATS:
            formats[name] = QUANTITY_FORMATS[name]
    return formats


def write_xlsx(scope: ExportScope, path: str) -> None:
    """A Summary sheet (one row per team with its invoice id, and a SUMIF of the Detail sheet
    beside each total as a check) and a Detail sheet of the team x GPU model x day lines; both
    end in a totals row of SUM formulas."""
    from openpyxl import Workbook

    showback = is_showback()
    workbook = Workbook(write_only=True)
    value_column = "gpu_hours" if showback else "cost"
    summary_columns = ["team"] + ([] if showback else ["invoice_id"]) + ["gpu_hours"]
    summary_columns += ([] if showback else ["cost"]) + ["check_from_detail"]
    summed = [name for name in summary_columns if name not in ("team", "invoice_id")]
    summary = _Sheet(workbook, "Summary", summary_columns, summed)
    summary.formats["check_from_detail"] = summary.formats[value_column]
    columns = table_columns(SUMMARY, showback=showback)
    summed = [name for name in columns if name in QUANTITY_FORMATS or name in MONEY_COLUMNS]
    detail = _Sheet(workbook, "Detail", columns, summed)
    for row in table_rows(ExportScope(scope.period, scope.team_id, SUMMARY)):
        detail.add(row)
    detail_last = detail.rows
    detail.close("period")
    team_range = f"Detail!${detail.letters['team']}$2:${detail.letters['team']}${detail_last}"
    letter = detail.letters[value_column]
    value_range = f"Detail!${letter}$2:${letter}${detail_last}"
    for total in team_totals(scope.period):
        if not _in_scope(scope, total):
            continue
        row_number = summary.rows + 1
        summary.add(
            {
                "team": total["sub_account"],
                "invoice_id": invoice_id(scope.period, total["sub_account"]),
                "gpu_hours": total["gpu_hours"],
                "cost": total["cost"],
                "check_from_detail": f"=SUMIF({team_range},A{row_number},{value_range})",
            }
        )
    summary.close("team")
    workbook.save(path)


def _in_scope(scope: ExportScope, total: dict) -> bool:
    return scope.team_id is None or total["team_id"] == scope.team_id


def _xlsx_value(name: str, value):
    if name == "day" and value:
        return date.fromisoformat(value)  # a real date, so Excel's filters offer days
    if isinstance(value, Decimal):
        return float(value)
    return value


def xlsx_file(scope: ExportScope):
    handle = tempfile.NamedTemporaryFile(suffix=".xlsx")  # noqa: SIM115 - handed to the response
    try:
        write_xlsx(scope, handle.name)
    except BaseException:
        handle.close()  # a failed build leaves no half-written file behind
        raise
    handle.seek(0)
    return handle
