"""Chargeback exports read straight from the ledger, one module per part:

- `lines`: the export's lines, grouped and ordered in one query, and the one rounding rule every
  format shares (`export_lines`; `team_totals` for the page);
- `tables`: CSV and JSON, streamed;
- `xlsx`: the finance workbook, written row by row to a temporary file.
FOCUS (`billing.focus`) and the monthly statements (`billing.statements`) are built from the
same lines. Memory stays bounded whatever the month's size: rows come from the database through
a server-side cursor and leave as they are written.

The names below are what the rest of the portal uses.
"""

from apps.billing.choices import PLATFORM_COST_CENTER
from apps.billing.exports.lines import (
    COMPONENTS,
    DETAIL,
    PARTS,
    QUANTITY_PLACES,
    SUMMARY,
    USAGE,
    ExportScope,
    RunningRounder,
    adjustment_label,
    adjustment_labels,
    cents,
    export_lines,
    flag,
    gpu_hours,
    team_totals,
)
from apps.billing.exports.tables import (
    MONEY_COLUMNS,
    csv_chunks,
    json_chunks,
    table_columns,
    table_rows,
)
from apps.billing.exports.xlsx import TOTAL_LABEL, money_format, write_xlsx, xlsx_file

__all__ = [
    "COMPONENTS", "DETAIL", "MONEY_COLUMNS", "PARTS", "PLATFORM_COST_CENTER", "QUANTITY_PLACES",
    "SUMMARY", "TOTAL_LABEL", "USAGE", "ExportScope", "RunningRounder", "adjustment_label",
    "adjustment_labels", "cents", "csv_chunks", "export_lines", "flag", "gpu_hours",
    "json_chunks", "money_format", "table_columns", "table_rows", "team_totals",
    "write_xlsx", "xlsx_file",
]  # fmt: skip
