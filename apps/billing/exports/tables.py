"""The chargeback as a table (CSV and JSON): one row per export line (`lines.export_lines`),
then the month's platform-cost recovery lines. Both stream: rows leave as they are read."""

import csv
import json
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal

from django.conf import settings

from apps.billing.choices import PLATFORM_COST_CENTER, is_showback
from apps.billing.exports.lines import (
    COMPONENTS,
    DETAIL,
    ExportScope,
    export_lines,
    flag,
    gpu_hours,
)
from apps.billing.periods import month_bounds
from apps.billing.units import NO_UNIT, team_unit_columns

MONEY_COLUMNS = ("cost", "busy_cost", *COMPONENTS, "adjustment_cost")


def table_columns(level: str, *, showback: bool) -> list[str]:
    columns = ["period", "day", "team", "cost_center", "unit_path", "unit_cost_center"]
    columns += ["line_type", "description", "gpu_model"]
    if level == DETAIL:
        columns += ["source", "source_id", "gpu_uuid", "node", "gpu_index", "over_quota"]
        columns += [] if showback else ["unit_price"]
    columns += ["gpu_hours", "busy_gpu_hours", "held_idle_gpu_hours", "over_quota_gpu_hours"]
    columns += ["energy_kwh"]
    columns += [] if showback else [*MONEY_COLUMNS, "currency"]
    return [*columns, "draft"]


def table_rows(scope: ExportScope, lines: Iterator[dict] | None = None) -> Iterator[dict]:
    """The table's rows of `scope` (from `lines`, when the caller reads the export's lines
    itself), then its recovery rows."""
    showback = is_showback()
    columns = table_columns(scope.level, showback=showback)
    units = team_unit_columns()
    for line in export_lines(scope) if lines is None else lines:
        row = {
            **units.get(line["team_id"], NO_UNIT),
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
        yield from _recovery_rows(scope, columns, units)


def _recovery_rows(scope: ExportScope, columns: list[str], units: dict) -> Iterator[dict]:
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
            **(units.get(team.pk, NO_UNIT) if team else NO_UNIT),
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


CHUNK_CHARS = 64 * 1024


def csv_chunks(header: list[str], rows: Iterator[dict]) -> Iterator[str]:
    """CSV text in chunks of about CHUNK_CHARS (None is written as an empty field), so a large
    export leaves in few writes. The header comes with the first row alone, so the first chunk
    has run the query (portal.downloads)."""
    writer = csv.writer(_Echo())
    rows = iter(rows)
    head = writer.writerow(header)
    first = next(rows, None)
    if first is None:
        yield head
        return
    yield head + writer.writerow(list(map(first.__getitem__, header)))
    buffer, size = [], 0
    for row in rows:
        line = writer.writerow(list(map(row.__getitem__, header)))
        buffer.append(line)
        size += len(line)
        if size >= CHUNK_CHARS:
            yield "".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer)


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


TOTAL_LABEL = "Total"
