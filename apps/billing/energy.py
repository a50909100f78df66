"""Powered-off capacity in GPU-hours, energy and money.

A node powered down to save energy (any of fleet's powered-down states, from its power history:
``fleet.selectors.powered_off_intervals``) is not idle capacity: metering charges none of its
GPUs' time as unallocated (``powered_off_spans`` is the hook metering calls; the time gets no
ledger row, so the platform's cost, and what cost recovery shares out, shrinks by it).

What it saved is reported beside the charges (statements, exports, the cost dashboard):
``powered_off_by_model`` / ``powered_off_by_gpu_day`` give the powered-off GPU-hours and the
energy saved, each GPU's measured idle draw x its hours off, priced at the energy price of the
rate card in force (``RateCard.energy_price_per_kwh``). A GPU's idle draw is the average power
of its fully idle hours (hour rollups with no busy second) over the ``IDLE_DRAW_DAYS`` before
the window ends; a node's is the sum of its GPUs'. Telemetry measures GPUs only, so the node's
CPUs, fans and disks are not counted: the saving is a lower bound. A GPU never measured idle
saves nothing here (``unmeasured_gpus`` counts them).
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db.models import Avg

from apps.billing.pricing import RateBook
from apps.fleet.models import Gpu
from apps.fleet.selectors import powered_off_intervals
from apps.telemetry.models import GpuHourRollup

IDLE_DRAW_DAYS = 30
KWH_PLACES = Decimal("0.000001")
COST_PLACES = Decimal("0.0000000001")
HOURS_PLACES = Decimal("0.000001")
ZERO = Decimal(0)


@dataclass(frozen=True, slots=True)
class _OffSpan:
    gpu_id: int
    uuid: str
    model_id: int
    model: str
    start: datetime
    end: datetime


def _spans(start: datetime, end: datetime) -> list[_OffSpan]:
    """Each GPU's powered-off time in [start, end), clipped to its time in the fleet (never a
    MIG slice: its parent is the capacity)."""
    intervals = powered_off_intervals(start, end)
    if not intervals:
        return []
    gpus = defaultdict(list)
    for gpu in Gpu.objects.filter(
        node_id__in={i.node_id for i in intervals}, mig_parent__isnull=True
    ).select_related("model"):
        gpus[gpu.node_id].append(gpu)
    spans = []
    for interval in intervals:
        for gpu in gpus[interval.node_id]:
            span_start = max(interval.start, gpu.in_fleet_since)
            span_end = min(interval.end, gpu.retired_at or interval.end)
            if span_end > span_start:
                spans.append(
                    _OffSpan(gpu.pk, gpu.uuid, gpu.model_id, gpu.model.name, span_start, span_end)
                )
    return spans


def powered_off_spans(start: datetime, end: datetime) -> list[tuple[int, int, int]]:
    """(GPU id, start, end in epoch seconds) of every GPU's powered-off time in [start, end):
    what metering leaves uncharged."""
    spans = _spans(start, end)
    return [(s.gpu_id, int(s.start.timestamp()), int(s.end.timestamp())) for s in spans]


def idle_draw_watts(gpu_ids, *, until: datetime) -> dict[int, float]:
    """GPU id -> its average power (W) over its fully idle hours in the ``IDLE_DRAW_DAYS``
    before ``until``; GPUs never measured idle are left out."""
    rows = (
        GpuHourRollup.objects.filter(
            gpu_id__in=gpu_ids,
            bucket__gte=until - timedelta(days=IDLE_DRAW_DAYS),
            bucket__lt=until,
            busy_seconds=0,
            power_avg_w__isnull=False,
        )
        .values("gpu_id")
        .annotate(watts=Avg("power_avg_w"))
        .order_by()
    )
    return {row["gpu_id"]: row["watts"] for row in rows}


@dataclass
class PoweredOff:
    """Powered-off capacity of one GPU model (or of one GPU-day) and what it saved."""

    gpu_model: str
    gpu_hours: Decimal = ZERO
    energy_saved_kwh: Decimal = ZERO
    energy_saved_cost: Decimal = ZERO  # at the rate cards' energy price; unpriced kWh add 0
    unmeasured_gpus: int = 0  # GPUs with powered-off hours but no measured idle draw


def _pieces(start: datetime, end: datetime):
    """Each powered-off span cut at UTC midnights, with its energy: (span, piece start, piece
    end, kWh or None when the GPU's idle draw is unknown)."""
    spans = _spans(start, end)
    draw = idle_draw_watts({s.gpu_id for s in spans}, until=end)
    for span in spans:
        cursor = span.start
        while cursor < span.end:
            midnight = datetime.combine(cursor.astimezone(UTC).date(), datetime.min.time(), UTC)
            piece_end = min(span.end, midnight + timedelta(days=1))
            hours = (piece_end - cursor).total_seconds() / 3600
            watts = draw.get(span.gpu_id)
            kwh = None if watts is None else Decimal(watts * hours / 1000).quantize(KWH_PLACES)
            yield span, cursor, piece_end, kwh
            cursor = piece_end


def _add(total: PoweredOff, rates: RateBook, span: _OffSpan, start, end, kwh) -> None:
    total.gpu_hours += Decimal((end - start).total_seconds() / 3600).quantize(HOURS_PLACES)
    if kwh is None:
        return
    total.energy_saved_kwh += kwh
    card = rates.card_at(span.model_id, start)
    if card is not None and card.energy_price_per_kwh:
        total.energy_saved_cost += (kwh * card.energy_price_per_kwh).quantize(COST_PLACES)


def powered_off_by_model(start: datetime, end: datetime) -> list[PoweredOff]:
    """Per GPU model (by name), the GPU-hours powered off in [start, end) and the energy and
    money that saved; models with none are left out."""
    rates = RateBook(start=start, end=end)
    totals: dict[str, PoweredOff] = {}
    unmeasured: dict[str, set[int]] = defaultdict(set)
    for span, piece_start, piece_end, kwh in _pieces(start, end):
        total = totals.setdefault(span.model, PoweredOff(span.model))
        _add(total, rates, span, piece_start, piece_end, kwh)
        if kwh is None:
            unmeasured[span.model].add(span.gpu_id)
    for model, gpus in unmeasured.items():
        totals[model].unmeasured_gpus = len(gpus)
    return [totals[model] for model in sorted(totals)]


def powered_off_by_gpu_day(start: datetime, end: datetime) -> dict[tuple[str, date], PoweredOff]:
    """(GPU UUID, UTC day) -> the GPU's powered-off hours that day and what they saved."""
    rates = RateBook(start=start, end=end)
    days: dict[tuple[str, date], PoweredOff] = {}
    for span, piece_start, piece_end, kwh in _pieces(start, end):
        key = (span.uuid, piece_start.astimezone(UTC).date())
        total = days.setdefault(key, PoweredOff(span.model))
        _add(total, rates, span, piece_start, piece_end, kwh)
        total.unmeasured_gpus = 1 if kwh is None else 0
    return days
