"""Chargeback exports (CSV, JSON, XLSX, FinOps FOCUS 1.2) read straight from the ledger.

Rounding rule. The ledger keeps each charge at full precision. Exported lines are rounded to
cents, half-even, with a running total: walking the lines in the export's fixed order (team,
then day, GPU model, source), each line's cost is round(total up to and including it) minus
round(total before it). So every line is within a cent of its exact cost, and any team's lines,
the platform's lines and all lines together sum exactly to their rounded exact totals; every
format and detail level gives the same team totals, and the team totals plus the platform's
unallocated capacity equal the fleet's cost to the cent. A line's components (held-idle cost,
over-quota cost, energy cost) follow the same rule from the same running total: a component c
is round(total before the line + c) minus round(total before the line), so a component is never
negative and never more than its line. Exact totals come from the database with `ExactSum`, so
both databases (PostgreSQL, and SQLite, which keeps decimals as floats) give the same cents.

Exports stream: rows come from the database in chunks and leave as they are written, so memory
stays bounded whatever the period's size (XLSX is written in openpyxl's write-only mode to a
temporary file).
"""

import csv
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from functools import lru_cache

from django.conf import settings
from django.db.models import Case, F, IntegerField, Sum, Value, When
from django.db.models.functions import TruncDate

from apps.billing.choices import PLATFORM_COST_CENTER, ChargeSource, is_showback
from apps.billing.models import BillingPeriod, LedgerEntry
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


def _team_order():
    return [F("team__slug").asc(nulls_last=True)]


def _lines_queryset(scope: ExportScope):
    entries = LedgerEntry.objects.filter(period_id=scope.period.pk)
    if scope.team_id is not None:
        entries = entries.filter(team_id=scope.team_id)
    order = [*_team_order(), "day", F("gpu_model__name").asc(nulls_first=True)]
    if scope.level == DETAIL:
        order += ["source", "source_id", F("gpu__uuid").asc(nulls_first=True), "over_quota"]
    return (
        entries.annotate(day=TruncDate("slice_start", tzinfo=UTC))
        .values(*GROUP_FIELDS[scope.level])
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
        .order_by(*_team_order())
    )
    carried = Decimal(0)
    for row in totals:
        if row["team_id"] == scope.team_id:
            break
        carried += row["total"]
    return carried


def export_lines(scope: ExportScope) -> Iterator[dict]:
    """The export's lines in order, each with its exact and its rounded cost."""
    rounder = RunningRounder(_carried_before(scope))
    for row in _lines_queryset(scope).iterator(chunk_size=5000):
        _round_line(rounder, row)
        row["sub_account"] = row["team__slug"] or PLATFORM_COST_CENTER
        yield row


def team_totals(period: BillingPeriod) -> list[dict]:
    """Per team (platform last): GPU-hours, busy/idle hours, over-quota and rounded cost, with
    the same rounding as the exports (their lines sum to these)."""
    rows = (
        LedgerEntry.objects.filter(period_id=period.pk)
        .values("team_id", "team__slug", "team__name")
        .annotate(
            sum_gpu_seconds=Sum("gpu_seconds"),
            sum_busy_seconds=Sum("busy_seconds"),
            held_idle_seconds=Sum(_held_idle_seconds()),
            sum_energy_kwh=ExactSum("energy_kwh", places=6),
            **_money_sums(),
        )
        .order_by(*_team_order())
    )
    rounder = RunningRounder()
    result = []
    for row in rows:
        _round_line(rounder, row)
        row["sub_account"] = row["team__slug"] or PLATFORM_COST_CENTER
        row["gpu_hours"] = gpu_hours(row["sum_gpu_seconds"])
        row["busy_gpu_hours"] = gpu_hours(row["sum_busy_seconds"])
        row["held_idle_gpu_hours"] = gpu_hours(row["held_idle_seconds"])
        result.append(row)
    return result


COMPONENTS = ("held_idle_cost", "over_quota_cost", "energy_cost")


def _round_line(rounder: RunningRounder, row: dict) -> None:
    """Round a line's cost and its components with the running total (module docstring)."""
    parts = {
        "held_idle_cost": row["held_idle_cost"],
        "over_quota_cost": row["over_quota_cost"],
        "energy_cost": row["sum_energy_cost"],
    }
    row.update({f"exact_{name}": part or Decimal(0) for name, part in parts.items()})
    row["cost"] = rounder.take(row["exact_cost"], parts)
    row.update(parts)


# ---- CSV / JSON ------------------------------------------------------------------------------

MONEY_COLUMNS = ("cost", "held_idle_cost", "over_quota_cost", "energy_cost")


def table_columns(level: str, *, showback: bool) -> list[str]:
    columns = ["period", "day", "team", "cost_center", "gpu_model"]
    if level == DETAIL:
        columns += ["source", "source_id", "gpu_uuid", "node", "gpu_index", "over_quota"]
        columns += [] if showback else ["unit_price"]
    columns += ["gpu_hours", "busy_gpu_hours", "held_idle_gpu_hours", "over_quota_gpu_hours"]
    columns += ["energy_kwh"]
    columns += [] if showback else ["cost", *COMPONENTS, "currency"]
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
            "cost": line["cost"],
            "held_idle_cost": line["held_idle_cost"],
            "over_quota_cost": line["over_quota_cost"],
            "energy_cost": line["energy_cost"],
            "currency": settings.BILLING_CURRENCY,
            "draft": flag(scope.draft),
        }
        yield {name: row[name] for name in columns}


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_chunks(header: list[str], rows: Iterator[dict]) -> Iterator[str]:
    """CSV text, one line per chunk (None is written as an empty field)."""
    writer = csv.writer(_Echo())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow(list(map(row.__getitem__, header)))


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
    yield json.dumps(head)[:-1] + ', "rows": ['
    for index, row in enumerate(rows):
        yield ("," if index else "") + json.dumps(row, default=str)
    yield "]}"


# ---- XLSX ------------------------------------------------------------------------------------


def write_xlsx(scope: ExportScope, path: str) -> None:
    """Summary sheet (one row per team, with a SUMIF of the detail sheet beside each value and
    a SUM total), and a Detail sheet of the team x GPU model x day lines."""
    from openpyxl import Workbook

    showback = is_showback()
    workbook = Workbook(write_only=True)
    summary = workbook.create_sheet("Summary")
    detail = workbook.create_sheet("Detail")
    columns = table_columns(SUMMARY, showback=showback)
    detail.append(columns)
    detail_rows = 1
    for row in table_rows(ExportScope(scope.period, scope.team_id, SUMMARY)):
        detail.append([_xlsx_value(row[name]) for name in columns])
        detail_rows += 1
    value_column = "cost" if not showback else "gpu_hours"
    team_letter = _letter(columns.index("team"))
    value_letter = _letter(columns.index(value_column))
    title = f"{value_column} {scope.period.month:%Y-%m}" + (" (DRAFT)" if scope.draft else "")
    summary.append(["team", "gpu_hours", value_column, "check: sum of detail", title])
    totals = [t for t in team_totals(scope.period) if _in_scope(scope, t)]
    for index, total in enumerate(totals, start=2):
        value = total["gpu_hours"] if showback else total["cost"]
        summary.append(
            [
                total["sub_account"],
                float(total["gpu_hours"]),
                float(value),
                f"=SUMIF(Detail!{team_letter}2:{team_letter}{detail_rows},A{index},"
                f"Detail!{value_letter}2:{value_letter}{detail_rows})",
            ]
        )
    last = len(totals) + 1
    summary.append(["total", f"=SUM(B2:B{last})", f"=SUM(C2:C{last})", f"=SUM(D2:D{last})"])
    workbook.save(path)


def _in_scope(scope: ExportScope, total: dict) -> bool:
    return scope.team_id is None or total["team_id"] == scope.team_id


def _letter(index: int) -> str:
    from openpyxl.utils import get_column_letter

    return get_column_letter(index + 1)


def _xlsx_value(value):
    if isinstance(value, Decimal):
        return float(value)
    return value


def xlsx_file(scope: ExportScope):
    handle = tempfile.NamedTemporaryFile(suffix=".xlsx")  # noqa: SIM115 - handed to the response
    write_xlsx(scope, handle.name)
    handle.seek(0)
    return handle


# ---- FOCUS 1.2 -------------------------------------------------------------------------------

FOCUS_COLUMNS = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingAccountType",
    "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart",
    "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost",
    "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory", "PricingQuantity",
    "PricingUnit", "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId",
    "ResourceName", "ResourceType", "ServiceCategory", "ServiceName", "SkuId", "SkuPriceId",
    "SubAccountId", "SubAccountName", "SubAccountType", "Tags",
    "x_BusyGpuHours", "x_IdleGpuHours", "x_EnergyKwh", "x_ReservationId", "x_JobId",
    "x_OverQuota", "x_Draft",
]  # fmt: skip


@lru_cache(maxsize=4096)
def _focus_time(moment: datetime | date) -> str:
    if not isinstance(moment, datetime):
        moment = datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def focus_rows(scope: ExportScope) -> Iterator[dict]:
    """One FOCUS row per team x source x GPU x day (plus one per adjustment)."""
    period_start, period_end = month_bounds(scope.period.month)
    provider = settings.BILLING_PROVIDER_NAME
    currency = settings.BILLING_CURRENCY
    draft = flag(scope.draft)
    billing_start, billing_end = _focus_time(period_start), _focus_time(period_end)
    for line in export_lines(ExportScope(scope.period, scope.team_id, DETAIL)):
        source = line["source"]
        adjustment = source == ChargeSource.ADJUSTMENT
        quantity = gpu_hours(line["sum_gpu_seconds"])
        unit_price = line["unit_price"] or Decimal(0)
        day_start = datetime(line["day"].year, line["day"].month, line["day"].day, tzinfo=UTC)
        idle_seconds = (
            line["sum_gpu_seconds"]
            if source == ChargeSource.UNALLOCATED
            else line["held_idle_seconds"]
        )
        yield {
            "BilledCost": line["cost"],
            "BillingAccountId": provider,
            "BillingAccountName": provider,
            "BillingAccountType": "Internal",
            "BillingCurrency": currency,
            "BillingPeriodEnd": billing_end,
            "BillingPeriodStart": billing_start,
            "ChargeCategory": "Adjustment" if adjustment else "Usage",
            "ChargeClass": "Correction" if adjustment else None,
            "ChargeDescription": _charge_description(line),
            "ChargeFrequency": "One-Time" if adjustment else "Usage-Based",
            "ChargePeriodEnd": _focus_time(min(day_start + timedelta(days=1), period_end)),
            "ChargePeriodStart": _focus_time(day_start),
            "ConsumedQuantity": None if adjustment else quantity,
            "ConsumedUnit": None if adjustment else "GPU-Hours",
            "ContractedCost": line["cost"],
            "ContractedUnitPrice": None if adjustment else unit_price,
            "EffectiveCost": line["cost"],
            "InvoiceIssuerName": provider,
            "ListCost": line["cost"] if adjustment else cents(quantity * unit_price),
            "ListUnitPrice": None if adjustment else unit_price,
            "PricingCategory": None if adjustment else "Standard",
            "PricingQuantity": None if adjustment else quantity,
            "PricingUnit": None if adjustment else "GPU-Hours",
            "ProviderName": provider,
            "PublisherName": provider,
            "RegionId": None,
            "RegionName": None,
            "ResourceId": line["gpu__uuid"],
            "ResourceName": (
                f"{line['gpu__node__hostname']}/gpu{line['gpu__index']}"
                if line["gpu__uuid"]
                else None
            ),
            "ResourceType": "GPU" if line["gpu__uuid"] else None,
            "ServiceCategory": "AI and Machine Learning",
            "ServiceName": "GPU compute",
            "SkuId": line["gpu_model__name"],
            "SkuPriceId": line["rate_card_id"],
            "SubAccountId": line["sub_account"],
            "SubAccountName": line["team__name"] or "Platform (unallocated capacity)",
            "SubAccountType": "Team" if line["team_id"] else "Platform",
            "Tags": json.dumps(
                {"cost_center": line["team__cost_center"] or line["sub_account"]},
                sort_keys=True,
            ),
            "x_BusyGpuHours": gpu_hours(line["sum_busy_seconds"]),
            "x_IdleGpuHours": gpu_hours(idle_seconds),
            "x_EnergyKwh": line["sum_energy_kwh"],
            "x_ReservationId": line["source_id"] if source == ChargeSource.RESERVATION else None,
            "x_JobId": line["source_id"] if source == ChargeSource.JOB else None,
            "x_OverQuota": flag(line["over_quota"]),
            "x_Draft": draft,
        }


def _charge_description(line: dict) -> str:
    source, model = line["source"], line["gpu_model__name"]
    if source == ChargeSource.RESERVATION:
        return f"{model} GPU reservation #{line['source_id']}"
    if source == ChargeSource.JOB:
        return f"{model} GPU job #{line['source_id']}"
    if source == ChargeSource.UNALLOCATED:
        return f"{model} unallocated capacity"
    return f"Adjustment #{line['source_id']}"
