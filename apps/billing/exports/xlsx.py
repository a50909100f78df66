"""The chargeback as an XLSX workbook laid out for finance: a Summary sheet (one row per team,
its invoice id and a SUMIF check against the Detail sheet) and a Detail sheet of the summary
lines. Written in openpyxl's write-only mode to a temporary file, row by row, so memory stays
bounded whatever the month's size."""

import tempfile
from collections.abc import Iterator
from contextlib import closing
from datetime import date
from decimal import Decimal

from django.conf import settings

from apps.billing.choices import is_showback
from apps.billing.exports import tables
from apps.billing.exports.lines import SUMMARY, ExportScope, export_lines, gpu_hours
from apps.billing.exports.tables import MONEY_COLUMNS, table_columns
from apps.billing.invoices import invoice_id

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
        # A value of a column without a format goes in bare: openpyxl writes it as it would its
        # cell, without first failing to take a cell as a value (most of its time per cell).
        # Empty values stay cells, which it writes as empty elements where bare None is left out.
        formats, cells = self.formats, []
        for name in self.columns:
            value = _xlsx_value(name, values[name])
            number_format = formats.get(name)
            if number_format is None and value is not None:
                cells.append(value)
            else:
                cells.append(self._cell(value, number_format=number_format))
        self._append(cells)

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
    totals: dict = {}  # per team, from the same lines: one pass over the month
    lines_scope = ExportScope(scope.period, scope.team_id, SUMMARY)
    # closing: a failure part-way releases the query's server-side cursor at once
    with closing(export_lines(lines_scope)) as lines:
        for row in tables.table_rows(lines_scope, _adding_up(lines, totals)):
            detail.add(row)
    detail_last = detail.rows
    detail.close("period")
    team_range = f"Detail!${detail.letters['team']}$2:${detail.letters['team']}${detail_last}"
    letter = detail.letters[value_column]
    value_range = f"Detail!${letter}$2:${letter}${detail_last}"
    for total in totals.values():
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


def _adding_up(lines: Iterator[dict], totals: dict) -> Iterator[dict]:
    """The lines, passed on as they are, while adding up each team's GPU-hours and cost (the
    sums of its rounded lines, as `team_totals` gives them) into `totals`, teams in order."""
    for line in lines:
        total = totals.get(line["team_id"])
        if total is None:
            total = totals[line["team_id"]] = {
                "sub_account": line["sub_account"], "seconds": 0, "cost": Decimal(0)
            }  # fmt: skip
        total["seconds"] += line["sum_gpu_seconds"] or 0
        total["cost"] += line["cost"]
        yield line
    for total in totals.values():
        total["gpu_hours"] = gpu_hours(total["seconds"])


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
