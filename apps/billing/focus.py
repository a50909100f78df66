"""FinOps FOCUS exports (1.3, the default, and 1.2 for older tools) of a month's ledger.

One row per team x source x GPU x day, plus one per adjustment, from the detail lines of
`exports.export_lines`, so BilledCost sums per SubAccountId to the chargeback page's team totals
to the cent. Both versions carry InvoiceId (one per team and month, `DRAFT-` while the month is
open), ServiceSubcategory, SkuMeter and the recommended columns we have data for.

1.3 adds ServiceProviderName and HostProviderName (ProviderName and PublisherName are deprecated
in 1.3 but still present there), CapacityReservationId/Status and the split-cost allocation
columns. Each GPU-day is an origin charge split between the teams that held it (their busy
share, and the share they held idle, as separate rows), jobs outside bookings, and the
platform's unallocated capacity. AllocatedMethodId names that method; AllocatedMethodDetails
gives each row's ratio of the GPU-day's GPU-time (the ratios of one GPU-day add up to exactly 1);
the platform's rows have no AllocatedResourceId, as the spec asks for the unallocated portion.
A split row carries its share of every quantity and cost of its line (GPU-hours, kWh, energy
cost, list cost), so a line's rows add up to it exactly. Our own columns carry the `x_` prefix;
x_BusyCost, x_HeldIdleCost, x_OverQuotaCost and x_EnergyCost are the line's rounded parts, the
same figures as in every other format.

Powered-down capacity is not charged (`energy.py`): x_PoweredOffGpuHours and x_EnergySavedKwh
carry a GPU-day's on its unallocated-capacity row (0 elsewhere; a GPU-day off throughout gets a
row that costs nothing), in an export of every team."""

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from functools import lru_cache
from typing import NamedTuple

from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.billing.choices import PLATFORM_COST_CENTER, ChargeSource
from apps.billing.energy import powered_off_by_gpu_day
from apps.billing.exports import (
    DETAIL,
    QUANTITY_PLACES,
    USAGE,
    ExportScope,
    cents,
    csv_chunks,
    export_lines,
    flag,
    gpu_hours,
)
from apps.billing.invoices import invoice_id
from apps.billing.periods import month_bounds
from apps.billing.units import NO_UNIT, focus_tags, team_unit_columns
from apps.fleet.models import Gpu

FOCUS_1_2 = "1.2"
FOCUS_1_3 = "1.3"
FOCUS_VERSIONS = (FOCUS_1_3, FOCUS_1_2)
DEFAULT_FOCUS_VERSION = FOCUS_1_3

SERVICE_CATEGORY = "AI and Machine Learning"
SERVICE_SUBCATEGORY = "Machine Learning"  # a child of SERVICE_CATEGORY in the spec's list
SKU_METER = "GPU time"
ALLOCATION_METHOD = "gpu-time-held"
TAG_PREFIX = "gpu-portal/"
RATIO_PLACES = Decimal("0.000001")

_COMMON = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingAccountType",
    "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart",
    "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost",
    "InvoiceId", "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "RegionId", "RegionName",
    "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
    "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceId", "SubAccountId", "SubAccountName",
    "SubAccountType", "Tags",
]  # fmt: skip
_NEW_IN_1_3 = [
    "AllocatedMethodDetails", "AllocatedMethodId", "AllocatedResourceId",
    "AllocatedResourceName", "AllocatedTags", "CapacityReservationId",
    "CapacityReservationStatus", "HostProviderName", "ServiceProviderName",
]  # fmt: skip
_OWN = [
    "x_BusyGpuHours", "x_IdleGpuHours", "x_EnergyKwh", "x_ReservationId", "x_JobId",
    "x_OverQuota", "x_Draft", "x_LineType", "x_BusyCost", "x_HeldIdleCost", "x_OverQuotaCost",
    "x_EnergyCost", "x_PoweredOffGpuHours", "x_EnergySavedKwh", "x_UnitPath",
]  # fmt: skip
FOCUS_COLUMNS = {
    FOCUS_1_2: [*_COMMON, *_OWN],
    FOCUS_1_3: [*sorted(_COMMON + _NEW_IN_1_3), *_OWN],
}


def focus_columns(version: str = DEFAULT_FOCUS_VERSION) -> list[str]:
    return FOCUS_COLUMNS[version]


@lru_cache(maxsize=4096)
def focus_time(moment: datetime | date) -> str:
    if not isinstance(moment, datetime):
        moment = datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def focus_rows(scope: ExportScope, version: str = DEFAULT_FOCUS_VERSION) -> Iterator[dict]:
    """The rows of a FOCUS export of `scope` (team or all, always at detail level)."""
    context = _Context(scope, version)
    for line in export_lines(ExportScope(scope.period, scope.team_id, DETAIL)):
        yield from _line_rows(context, line, version)
    yield from powered_off_and_recovery_rows(context, version)


def focus_csv_chunks(scope: ExportScope, version: str = DEFAULT_FOCUS_VERSION) -> Iterator[str]:
    """The FOCUS export of `scope` as CSV text in chunks, header first. PostgreSQL renders the
    rows itself (`focus_sql`: the same bytes, and Python only passes the text on); elsewhere
    (SQLite) the csv module writes `focus_rows`."""
    if connection.vendor == "postgresql":
        from apps.billing.focus_sql import focus_sql_chunks

        return focus_sql_chunks(scope, version)
    return csv_chunks(focus_columns(version), focus_rows(scope, version))


def powered_off_and_recovery_rows(context: "_Context", version: str) -> Iterator[dict]:
    """The rows that follow the lines: the GPU-days powered off that no line carried, then
    the month's recovery rows."""
    for line in context.powered_off_lines():
        yield from _line_rows(context, line, version)
    yield from _recovery_rows(context, version)


def _line_rows(context: "_Context", line: dict, version: str) -> Iterator[dict]:
    """The rows of one line: its row in 1.2; in 1.3 a row per share."""
    row = _base_row(context, line)
    if version == FOCUS_1_2:
        yield row
        return
    shares = _shares(line)
    offset, last = 0, len(shares) - 1
    for number, share in enumerate(shares):
        # The last share's row is the base row itself: one dict per row, no copies.
        yield _allocated_row(context, line, row if number == last else dict(row), share, offset)
        offset += share.seconds


def _recovery_rows(context: "_Context", version: str) -> Iterator[dict]:
    """Under a month's cost recovery policy (`recovery.py`), one row per team for its share of
    the platform's cost and, in an export of all teams, one platform row giving the same total
    back, so the export still sums to the fleet's total. In 1.3 they are a split-cost
    allocation of the platform's cost: AllocatedMethodId names the policy and
    AllocatedMethodDetails each row's ratio."""
    from apps.billing.recovery import RECOVERY_LINE, policy_for, recovery_entries

    scope = context.scope
    entries = recovery_entries(scope.period, scope.team_id)
    if not entries:
        return
    method = f"platform-cost-recovery-{policy_for(scope.period)}"
    last_day = (context.period_end - timedelta(days=1)).date()
    for entry in entries:
        team, amount = entry.team, entry.amount
        line = {
            "cost": amount, "sum_gpu_seconds": 0, "unit_price": None, "day": last_day,
            "held_idle_seconds": 0, "source": ChargeSource.ADJUSTMENT, "source_id": 0,
            "description": entry.description,
            "sub_account": team.slug if team else PLATFORM_COST_CENTER,
            "team__name": team.name if team else None, "team_id": team.pk if team else None,
            "team__cost_center": team.cost_center if team else None,
            "gpu__uuid": None, "gpu__node__hostname": None, "gpu__index": None,
            "gpu_model__name": None, "rate_card_id": None, "sum_busy_seconds": 0,
            "sum_energy_kwh": Decimal(0), "over_quota": False, "line_type": RECOVERY_LINE,
            "busy_cost": Decimal(0), "held_idle_cost": Decimal(0),
            "over_quota_cost": Decimal(0), "energy_cost": Decimal(0),
        }  # fmt: skip
        row = _base_row(context, line)
        if version == FOCUS_1_2:
            yield row
            continue
        row = _allocated_row(context, line, row, _shares(line)[0], 0)
        row["AllocatedMethodId"] = method
        row["AllocatedMethodDetails"] = json.dumps(
            {"Elements": [{"AllocatedRatio": float(entry.ratio)}], "x_Share": RECOVERY_LINE}
        )
        row["AllocatedTags"] = json.dumps(
            {f"{TAG_PREFIX}share": RECOVERY_LINE, f"{TAG_PREFIX}policy": method}, sort_keys=True
        )
        yield row


class _Context:
    """What every row of one export shares, computed once."""

    def __init__(self, scope: ExportScope, version: str) -> None:
        period_start, period_end = month_bounds(scope.period.month)
        self.scope = scope
        self.period_end = period_end
        self.provider = settings.BILLING_PROVIDER_NAME
        self.currency = settings.BILLING_CURRENCY
        self.draft = flag(scope.draft)
        self.units = team_unit_columns()  # team id -> unit path and cost centre
        self.billing_start = focus_time(period_start)
        self.billing_end = focus_time(period_end)
        self.invoice_ids = _Cached(lambda sub_account: invoice_id(scope.period, sub_account))
        self.tags = _Cached(lambda cost_center, team: focus_tags(self.units, cost_center, team))
        self.allocated_tags = _Cached(_allocated_tags)
        # ChargePeriodStart and ChargePeriodEnd of each day; a month has few
        self.charge_period = _Cached(self._charge_period)
        # The columns that follow from a row's team alone, per team (and the platform)
        self.team_columns = _Cached(self._team_columns)
        # The columns every row of this export has alike.
        provider = self.provider
        self.constant = {
            "BillingAccountId": provider,
            "BillingAccountName": provider,
            "BillingAccountType": "Internal",
            "BillingCurrency": self.currency,
            "BillingPeriodEnd": self.billing_end,
            "BillingPeriodStart": self.billing_start,
            "InvoiceIssuerName": provider,
            "ProviderName": provider,
            "PublisherName": provider,
            "RegionId": None,
            "RegionName": None,
            "ServiceCategory": SERVICE_CATEGORY,
            "ServiceName": "GPU compute",
            "ServiceSubcategory": SERVICE_SUBCATEGORY,
            "x_Draft": self.draft,
        }
        # 1.3's columns, as a row that no share fills in has them
        self.new_in_version = (
            {"ServiceProviderName": provider, "HostProviderName": provider, **NEW_IN_1_3_EMPTY}
            if version == FOCUS_1_3
            else {}
        )
        # (GPU UUID, day) -> powered-off hours and energy saved, not yet on a row; only in an
        # export of every team (the platform's rows are in no team's)
        self._powered_off = (
            powered_off_by_gpu_day(period_start, min(period_end, timezone.now()))
            if scope.team_id is None
            else {}
        )

    def _charge_period(self, day: date) -> tuple[str, str]:
        day_start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        end = min(day_start + timedelta(days=1), self.period_end)
        return focus_time(day_start), focus_time(end)

    def _team_columns(
        self, team_id: int | None, sub_account: str, name: str | None, cost_center: str | None
    ) -> dict:
        return {
            "InvoiceId": self.invoice_ids[sub_account],
            "SubAccountId": sub_account,
            "SubAccountName": name or "Platform (unallocated capacity)",
            "SubAccountType": "Team" if team_id else "Platform",
            "Tags": self.tags[cost_center or sub_account, team_id],
            "x_UnitPath": self.units.get(team_id, NO_UNIT)["unit_path"] or None,
        }

    def powered_off_columns(self, line: dict) -> dict:
        """x_PoweredOffGpuHours and x_EnergySavedKwh of a row: the GPU-day's, on the first
        unallocated-capacity row of that GPU-day; 0 elsewhere."""
        off = None
        if line["source"] == ChargeSource.UNALLOCATED and line["gpu__uuid"]:
            off = self._powered_off.pop((line["gpu__uuid"], line["day"]), None)
        if off is None:
            return NOT_POWERED_OFF
        return {
            "x_PoweredOffGpuHours": off.gpu_hours if off else Decimal(0),
            "x_EnergySavedKwh": off.energy_saved_kwh if off else Decimal(0),
        }

    def powered_off_lines(self) -> Iterator[dict]:
        """A line that costs nothing for each GPU-day powered off throughout (no charge row
        carried its hours)."""
        for (uuid, day), off in sorted(self._powered_off.items()):
            gpu = Gpu.objects.select_related("node").get(uuid=uuid)
            yield {
                "cost": Decimal(0), "sum_gpu_seconds": 0, "unit_price": None, "day": day,
                "held_idle_seconds": 0, "source": ChargeSource.UNALLOCATED, "source_id": 0,
                "description": f"{off.gpu_model} powered off (not charged)",
                "sub_account": PLATFORM_COST_CENTER, "team__name": None, "team_id": None,
                "team__cost_center": None, "gpu_model__name": off.gpu_model,
                "rate_card_id": None, "sum_busy_seconds": 0, "sum_energy_kwh": Decimal(0),
                "over_quota": False, "line_type": USAGE, "busy_cost": Decimal(0),
                "held_idle_cost": Decimal(0), "over_quota_cost": Decimal(0),
                "energy_cost": Decimal(0), "gpu__uuid": uuid, "gpu__index": gpu.index,
                "gpu__node__hostname": gpu.node.hostname,
                "gpu_day_seconds": 0, "gpu_day_before": 0,
            }  # fmt: skip

    @staticmethod
    def ratio(line: dict, offset: int, seconds: int) -> Decimal:
        """A share's part of the line's GPU-day, rounded with a running total in the order of
        the export of every team (the query gives the GPU-day's seconds before the line and in
        all; `offset`: the line's shares before this one), so that the parts of one GPU-day add
        up to exactly 1."""
        total = line["gpu_day_seconds"] or 0
        if total <= 0:
            return Decimal(0)
        before = (line["gpu_day_before"] or 0) + offset
        return _ratio(before + seconds, total) - _ratio(before, total)


class _Cached(dict):
    """A value per key, computed once per export (the few teams' invoice ids and tags)."""

    def __init__(self, compute) -> None:
        super().__init__()
        self.compute = compute

    def __missing__(self, key):
        value = self[key] = self.compute(*key) if isinstance(key, tuple) else self.compute(key)
        return value


def _ratio(part: int, total: int) -> Decimal:
    return (Decimal(part) / Decimal(total)).quantize(RATIO_PLACES, rounding=ROUND_HALF_EVEN)


NOT_POWERED_OFF = {"x_PoweredOffGpuHours": Decimal(0), "x_EnergySavedKwh": Decimal(0)}
USAGE_COLUMNS = {
    "ChargeCategory": "Usage", "ChargeClass": None, "ChargeFrequency": "Usage-Based",
    "ConsumedUnit": "GPU-Hours", "PricingCategory": "Standard", "PricingUnit": "GPU-Hours",
}  # fmt: skip
ADJUSTMENT_COLUMNS = {
    "ChargeCategory": "Adjustment", "ChargeClass": "Correction", "ChargeFrequency": "One-Time",
    "ConsumedQuantity": None, "ConsumedUnit": None, "ContractedUnitPrice": None,
    "ListUnitPrice": None, "PricingCategory": None, "PricingQuantity": None, "PricingUnit": None,
}  # fmt: skip
# In 1.3, before a row's share fills them in (`_allocated_row`)
NEW_IN_1_3_EMPTY = {
    "AllocatedMethodId": None, "AllocatedMethodDetails": None, "AllocatedResourceId": None,
    "AllocatedResourceName": None, "AllocatedTags": None, "CapacityReservationId": None,
    "CapacityReservationStatus": None,
}  # fmt: skip


def _base_row(context: _Context, line: dict) -> dict:
    """The FOCUS 1.2 row of one export line (in 1.3 also the new columns, empty): the columns
    every row of the export, of the line's team and of its day has alike come from the
    context, computed once."""
    source, cost = line["source"], line["cost"]
    adjustment = source == ChargeSource.ADJUSTMENT
    seconds = line["sum_gpu_seconds"]
    uuid, model = line["gpu__uuid"], line["gpu_model__name"]
    start, end = context.charge_period[line["day"]]
    row = {
        **context.constant,
        **context.team_columns[
            line["team_id"], line["sub_account"], line["team__name"], line["team__cost_center"]
        ],
        "BilledCost": cost,
        "ChargeDescription": line["description"],
        "ChargePeriodEnd": end,
        "ChargePeriodStart": start,
        "ContractedCost": cost,
        "EffectiveCost": cost,
        "ResourceId": uuid,
        "ResourceName": f"{line['gpu__node__hostname']}/gpu{line['gpu__index']}" if uuid else None,
        "ResourceType": "GPU" if uuid else None,
        "SkuId": model,
        "SkuMeter": SKU_METER if model else None,
        "SkuPriceId": line["rate_card_id"],
        "x_BusyGpuHours": gpu_hours(line["sum_busy_seconds"]),
        "x_IdleGpuHours": gpu_hours(
            seconds if source == ChargeSource.UNALLOCATED else line["held_idle_seconds"]
        ),
        "x_EnergyKwh": line["sum_energy_kwh"],
        "x_ReservationId": line["source_id"] if source == ChargeSource.RESERVATION else None,
        "x_JobId": line["source_id"] if source == ChargeSource.JOB else None,
        "x_OverQuota": "true" if line["over_quota"] else "false",
        "x_LineType": line["line_type"],
        "x_BusyCost": line["busy_cost"],
        "x_HeldIdleCost": line["held_idle_cost"],
        "x_OverQuotaCost": line["over_quota_cost"],
        "x_EnergyCost": line["energy_cost"],
        **context.powered_off_columns(line),
        **context.new_in_version,
    }
    if adjustment:
        row.update(ADJUSTMENT_COLUMNS)
        row["ListCost"] = cost
    else:
        quantity = gpu_hours(seconds)
        unit_price = line["unit_price"] or Decimal(0)
        row.update(USAGE_COLUMNS)
        row["ConsumedQuantity"] = row["PricingQuantity"] = quantity
        row["ContractedUnitPrice"] = row["ListUnitPrice"] = unit_price
        row["ListCost"] = cents(quantity * unit_price)
    return row


BUSY, HELD_IDLE, JOB, UNALLOCATED, NOT_SPLIT = "busy", "held-idle", "job", "unallocated", None
# The share of a line of a GPU that is not split (a booking's line is split: BUSY and HELD_IDLE)
WHOLE_SHARES = {ChargeSource.UNALLOCATED: UNALLOCATED, ChargeSource.JOB: JOB}


class _Share(NamedTuple):
    """One 1.3 row of a line: its GPU-seconds, and its part of every quantity and cost."""

    name: str | None
    seconds: int
    quantity: Decimal
    cost: Decimal
    list_cost: Decimal
    energy_kwh: Decimal
    energy_cost: Decimal
    busy_cost: Decimal
    held_idle_cost: Decimal


def _shares(line: dict) -> list[_Share]:
    """The 1.3 rows of one line: a booking's line becomes its busy (Used) and its held-idle
    (Unused) share; other lines stay whole. Every quantity and cost of the line is split by the
    same ratio (the share of its GPU-time), the Unused part rounded and the Used part the rest,
    so each share's figures add up to the line's exactly."""
    source, seconds = line["source"], line["sum_gpu_seconds"] or 0
    if source == ChargeSource.ADJUSTMENT or not line["gpu__uuid"]:
        name = NOT_SPLIT
    else:
        name = WHOLE_SHARES.get(source, BUSY)
    quantity = gpu_hours(seconds)
    whole = _Share(
        name,
        seconds,
        quantity,
        line["cost"],
        _list_cost(line, quantity),
        line["sum_energy_kwh"],
        line["energy_cost"],
        line["busy_cost"],
        line["held_idle_cost"],
    )
    if name != BUSY:
        return [whole]
    idle_seconds = _held_idle(line)
    if not idle_seconds:
        return [whole]
    fraction = Decimal(idle_seconds) / Decimal(seconds)
    idle_energy_cost = min(cents(whole.energy_cost * fraction), whole.energy_cost)
    idle_quantity = gpu_hours(idle_seconds)
    idle = _Share(
        name=HELD_IDLE,
        seconds=idle_seconds,
        quantity=idle_quantity,
        cost=whole.held_idle_cost + idle_energy_cost,
        list_cost=_list_cost(line, idle_quantity),
        energy_kwh=(whole.energy_kwh * fraction).quantize(QUANTITY_PLACES),
        energy_cost=idle_energy_cost,
        busy_cost=Decimal(0),
        held_idle_cost=whole.held_idle_cost,
    )
    busy = _Share(
        name=BUSY,
        seconds=seconds - idle_seconds,
        quantity=whole.quantity - idle.quantity,
        cost=whole.cost - idle.cost,
        list_cost=whole.list_cost - idle.list_cost,
        energy_kwh=whole.energy_kwh - idle.energy_kwh,
        energy_cost=whole.energy_cost - idle.energy_cost,
        busy_cost=whole.busy_cost,
        held_idle_cost=Decimal(0),
    )
    if busy.seconds > 0 or busy.cost != 0:
        return [busy, idle]
    return [idle]


def _list_cost(line: dict, quantity: Decimal) -> Decimal:
    if line["source"] == ChargeSource.ADJUSTMENT:
        return line["cost"]
    return cents(quantity * (line["unit_price"] or Decimal(0)))


def _allocated_row(context: _Context, line: dict, row: dict, share: _Share, offset: int) -> dict:
    """The 1.3 row of one share of a line, filled in on `row` (the line's base row, or a copy
    of it for all but its last share)."""
    name = share.name
    if name is NOT_SPLIT:
        return row
    cost, quantity = share.cost, share.quantity
    row["BilledCost"] = row["ContractedCost"] = row["EffectiveCost"] = cost
    row["ListCost"] = share.list_cost
    row["ConsumedQuantity"] = row["PricingQuantity"] = quantity
    row["ChargeDescription"] = _share_description(line, name)
    row["AllocatedMethodId"] = ALLOCATION_METHOD
    row["AllocatedMethodDetails"] = _method_details(
        context.ratio(line, offset, share.seconds), quantity, name
    )
    row["x_EnergyKwh"] = share.energy_kwh
    row["x_EnergyCost"] = share.energy_cost
    row["x_BusyCost"] = share.busy_cost
    row["x_HeldIdleCost"] = share.held_idle_cost
    row["x_OverQuotaCost"] = cost if line["over_quota"] else Decimal(0)
    row.update(_allocated_to(context, line, name))
    if name in (BUSY, HELD_IDLE):
        # a busy row's x_BusyGpuHours stays the base row's (the line's busy hours)
        if name == HELD_IDLE:
            row["x_BusyGpuHours"] = Decimal(0)
            row["x_IdleGpuHours"] = quantity
        else:
            row["x_IdleGpuHours"] = Decimal(0)
        row["CapacityReservationId"] = f"reservation/{line['source_id']}"
        row["CapacityReservationStatus"] = "Unused" if name == HELD_IDLE else "Used"
    return row


def _held_idle(line: dict) -> int:
    seconds = line["sum_gpu_seconds"] or 0
    return min(max(line["held_idle_seconds"] or 0, 0), seconds)


def _method_details(ratio: Decimal, quantity: Decimal, share: str) -> str:
    # What json.dumps writes for {"Elements": [{ratio, unit, quantity}], "x_Share": share},
    # written directly: this runs once per row.
    return (
        f'{{"Elements": [{{"AllocatedRatio": {float(ratio)!r}, "UsageUnit": "GPU-Hours", '
        f'"UsageQuantity": {float(quantity)!r}}}], "x_Share": "{share}"}}'
    )


def _allocated_to(context: _Context, line: dict, share: str) -> dict:
    if share == UNALLOCATED:
        # The spec: no AllocatedResourceId for the unallocated portion of the origin charge.
        return {"AllocatedTags": context.allocated_tags[None, UNALLOCATED]}
    kind = "job" if share == JOB else "reservation"
    sub_account, source_id = line["sub_account"], line["source_id"]
    resource_id = f"{kind}/{source_id}" + ("/held-idle" if share == HELD_IDLE else "")
    resource_name = f"{sub_account} {kind} #{source_id}"
    if share == HELD_IDLE:
        resource_name += " (held idle)"
    return {
        "AllocatedResourceId": resource_id,
        "AllocatedResourceName": resource_name,
        "AllocatedTags": context.allocated_tags[sub_account, share],
    }


def _allocated_tags(sub_account: str | None, share: str) -> str:
    if sub_account is None:
        return json.dumps({f"{TAG_PREFIX}share": share})
    return json.dumps(
        {f"{TAG_PREFIX}team": sub_account, f"{TAG_PREFIX}share": share}, sort_keys=True
    )


def _share_description(line: dict, share: str) -> str:
    text = line["description"]
    if share == BUSY:
        return f"{text}, busy share"
    if share == HELD_IDLE:
        return f"{text}, held idle share"
    return text
