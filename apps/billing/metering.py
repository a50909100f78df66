"""Metering: turn GPU holdings into append-only ledger entries.

What is charged, per GPU, over complete UTC hours:
- reservations, for their reserved time (active holdings), to the booking team;
- jobs that run outside a reservation, for their allocations' run time, to the job's team;
- every other second of every GPU in the fleet (not retired, not a MIG slice), as unallocated
  capacity, to the platform cost center.
So, for any interval, team charges + platform idle = fleet GPU-seconds x rates, exactly.

Time is cut into slices at every UTC hour and wherever a rate card starts or ends, so the same
use always produces the same slices whatever interval a run covers; the ledger's unique key
(source, source id, GPU, slice start) makes re-runs insert nothing twice. Only complete hours
(before the current one) are charged, so a slice is never written half-done.

Cost keeps full precision (10 decimal places): GPU cost = seconds x price / 3600 (x the
over-quota multiplier for work above the guarantee), energy cost = kWh x energy price, where
busy seconds and energy come from the hour rollups, prorated to the slice.
"""

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import lru_cache

from django.apps import apps as django_apps
from django.db import connection, transaction
from django.utils import timezone

from apps.billing.choices import ChargeSource
from apps.billing.models import BillingPeriod, LedgerEntry, RateCard
from apps.billing.periods import month_bounds, month_start
from apps.fleet.choices import GpuStatus
from apps.fleet.models import Gpu
from apps.reservations.models import ReservationGpu
from apps.telemetry.models import GpuHourRollup
from portal.bulk import insert_ignoring_duplicates

HOUR = timedelta(hours=1)
METERING_LOCK = 7_361_001  # pg advisory lock id: one metering run at a time
ZERO = Decimal(0)
ONE = Decimal(1)
COST_PLACES = Decimal("1e-10")
KWH_PLACES = Decimal("1e-6")
SECONDS_PER_HOUR = Decimal(3600)
JOULES_PER_KWH = 3_600_000.0
LEDGER_COLUMNS = (
    "period_id",
    "team_id",
    "source",
    "source_id",
    "gpu_id",
    "gpu_model_id",
    "slice_start",
    "slice_end",
    "gpu_seconds",
    "busy_seconds",
    "energy_kwh",
    "rate_card_id",
    "unit_price",
    "over_quota",
    "gpu_cost",
    "energy_cost",
    "cost",
    "created_at",
)


@dataclass(frozen=True, slots=True)
class Use:
    """Some source holding one GPU over [start, end), in epoch seconds."""

    start: int
    end: int
    source: str
    source_id: int
    team_id: int | None
    over_quota: bool


@dataclass(slots=True)
class MeterResult:
    start: datetime
    end: datetime
    inserted: int = 0
    skipped_closed: int = 0  # slices that fall in a closed period and were not charged
    periods: list[int] = field(default_factory=list)


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


@lru_cache(maxsize=65536)
def _instant(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def meter_interval(*, start: datetime, end: datetime, now: datetime | None = None) -> MeterResult:
    """Charge all GPU use in [start, end), widened to whole hours and cut at the last complete
    hour. Idempotent: running it again, or over an overlapping interval, inserts nothing twice.
    Slices in a closed period are not charged (counted in `skipped_closed`). Runs are serialized
    (a database lock), so concurrent runs cannot race."""
    now = now or timezone.now()
    start = floor_hour(start)
    end = min(floor_hour(end + HOUR - timedelta(microseconds=1)), floor_hour(now))
    result = MeterResult(start=start, end=end)
    if end <= start:
        return result
    with transaction.atomic():
        _serialize_metering()
        periods = _periods_for(start, end)
        result.periods = [p.pk for p in periods]
        fresh = not (
            LedgerEntry.objects.filter(slice_start__gte=start, slice_start__lt=end)
            .exclude(source=ChargeSource.ADJUSTMENT)
            .exists()
        )
        rows = _ledger_rows(start, end, periods, result)
        result.inserted = insert_ignoring_duplicates(
            LedgerEntry._meta.db_table,
            LEDGER_COLUMNS,
            rows,
            conflict=("slice_start", "gpu_id", "source", "source_id"),
            known_new=fresh,
        )
        for period in periods:
            if not period.is_closed and (
                period.metered_until is None or period.metered_until < end
            ):
                period.metered_until = min(end, month_bounds(period.month)[1])
                period.save(update_fields=["metered_until"])
    return result


def _serialize_metering() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [METERING_LOCK])


def _ledger_rows(start: datetime, end: datetime, periods: list, result: MeterResult):
    """Every ledger row of [start, end), as a generator of tuples in LEDGER_COLUMNS order.
    Everything is read here, before the generator starts: the caller's COPY holds the
    connection while the generator runs, so the generator itself must not query."""
    start_s, end_s = _epoch(start), _epoch(end)
    rates = _RateBook()
    rollups = _rollups(start, end)
    gpu_uses = list(_uses_per_gpu(start, end))
    period_of = {}
    for period in periods:
        first, last = (_epoch(t) for t in month_bounds(period.month))
        for hour in range(max(first, start_s), min(last, end_s), 3600):
            period_of[hour] = period
    created = timezone.now()

    def rows():
        for gpu_id, model_id, in_fleet, uses in gpu_uses:
            cuts = rates.cuts(model_id)
            for use in _with_unallocated(uses, start_s, end_s, in_fleet):
                for piece_start, piece_end in _slices(use.start, use.end, cuts):
                    hour = piece_start - piece_start % 3600
                    period = period_of[hour]
                    if period.is_closed:
                        result.skipped_closed += 1
                        continue
                    yield _ledger_row(
                        period.pk, gpu_id, model_id, use, piece_start, piece_end,
                        rates.card_at(model_id, piece_start), rollups.get((gpu_id, hour)), created,
                    )  # fmt: skip

    return rows()


def _periods_for(start: datetime, end: datetime) -> list[BillingPeriod]:
    periods = []
    month = month_start(start)
    while month_bounds(month)[0] < end:
        periods.append(BillingPeriod.objects.get_or_create(month=month)[0])
        month = month_bounds(month)[1].date()
    return periods


class _RateBook:
    """Rate cards per GPU model, and the instants (epoch seconds) where a model's price changes."""

    def __init__(self) -> None:
        self._cards: dict[int, list[RateCard]] = defaultdict(list)
        for card in RateCard.objects.order_by("effective_from"):
            self._cards[card.gpu_model_id].append(card)
        self._starts = {
            m: [_epoch(c.effective_from) for c in cards] for m, cards in self._cards.items()
        }
        self._ends = {
            m: [_epoch(c.effective_to) if c.effective_to else None for c in cards]
            for m, cards in self._cards.items()
        }
        self._cuts = {
            m: sorted(set(self._starts[m]) | {e for e in self._ends[m] if e is not None})
            for m in self._cards
        }

    def cuts(self, model_id: int) -> list[int]:
        return self._cuts.get(model_id, [])

    def card_at(self, model_id: int, at: int) -> RateCard | None:
        index = bisect_right(self._starts.get(model_id, []), at) - 1
        if index < 0:
            return None
        card_end = self._ends[model_id][index]
        return self._cards[model_id][index] if card_end is None or at < card_end else None


def _rollups(start: datetime, end: datetime) -> dict:
    rows = GpuHourRollup.objects.filter(bucket__gte=start, bucket__lt=end).values_list(
        "gpu_id", "bucket", "busy_seconds", "energy_j"
    )
    return {(gpu_id, _epoch(bucket)): (busy, energy) for gpu_id, bucket, busy, energy in rows}


def _uses_per_gpu(start: datetime, end: datetime):
    """(gpu id, model id, in fleet, [Use sorted by start]) for every GPU that matters."""
    uses: dict[int, list[Use]] = defaultdict(list)
    holdings = (
        ReservationGpu.objects.filter(active=True, start__lt=end, end__gt=start)
        .values_list(
            "gpu_id", "start", "end", "reservation_id", "reservation__team_id",
            "reservation__over_quota",
        )
    )  # fmt: skip
    for gpu_id, s, e, reservation_id, team_id, over_quota in holdings:
        uses[gpu_id].append(
            Use(_epoch(s), _epoch(e), ChargeSource.RESERVATION, reservation_id, team_id, over_quota)
        )
    for gpu_id, use in _job_uses(start, end):
        uses[gpu_id].append(use)
    gpus = Gpu.objects.values_list("id", "model_id", "status", "mig_parent_id")
    for gpu_id, model_id, status, mig_parent_id in gpus:
        in_fleet = status != GpuStatus.RETIRED and mig_parent_id is None
        if in_fleet or uses.get(gpu_id):
            yield gpu_id, model_id, in_fleet, sorted(uses.get(gpu_id, ()), key=lambda u: u.start)


def _job_uses(start: datetime, end: datetime):
    """Allocations of jobs that ran outside a reservation (a job inside one is already paid
    for by the booking). A running allocation is charged up to the end of the interval."""
    try:
        allocation = django_apps.get_model("jobs", "JobAllocation")
    except LookupError:
        return
    rows = (
        allocation.objects.filter(job__reservation__isnull=True, start__lt=end)
        .exclude(end__lte=start)
        .values_list("gpu_id", "start", "end", "job_id", "job__team_id", "over_quota")
    )
    for gpu_id, s, e, job_id, team_id, over_quota in rows:
        yield (
            gpu_id,
            Use(_epoch(s), _epoch(e or end), ChargeSource.JOB, job_id, team_id, over_quota),
        )


def _with_unallocated(uses: list[Use], start: int, end: int, in_fleet: bool):
    """The uses clipped to [start, end) and made disjoint (an overlap is charged once, to the
    earlier use), with the gaps between them as unallocated capacity for fleet GPUs."""
    cursor = start
    for use in uses:
        use_start, use_end = max(use.start, cursor), min(use.end, end)
        if use_end <= use_start:
            continue
        if in_fleet and use_start > cursor:
            yield Use(cursor, use_start, ChargeSource.UNALLOCATED, 0, None, False)
        yield Use(use_start, use_end, use.source, use.source_id, use.team_id, use.over_quota)
        cursor = use_end
    if in_fleet and cursor < end:
        yield Use(cursor, end, ChargeSource.UNALLOCATED, 0, None, False)


def _slices(start: int, end: int, rate_cuts: list[int]):
    """[start, end) cut at every UTC hour and at every rate change."""
    cuts = [c for c in rate_cuts if start < c < end] if rate_cuts else []
    piece_start = start
    while piece_start < end:
        next_cut = min(piece_start - piece_start % 3600 + 3600, end)
        while cuts and cuts[0] <= piece_start:
            cuts.pop(0)
        if cuts and cuts[0] < next_cut:
            next_cut = cuts[0]
        yield piece_start, next_cut
        piece_start = next_cut


def _ledger_row(period_id, gpu_id, model_id, use, piece_start, piece_end, card, rollup, created):
    seconds = piece_end - piece_start
    busy, energy_j = rollup or (None, None)
    fraction = seconds / 3600
    busy_seconds = min(seconds, round((busy or 0) * fraction))
    energy_kwh = (
        Decimal(energy_j * fraction / JOULES_PER_KWH).quantize(KWH_PLACES) if energy_j else ZERO
    )
    if card is None:
        unit_price, gpu_cost, energy_cost = ZERO, ZERO, ZERO
    else:
        unit_price = card.price_per_gpu_hour
        multiplier = card.over_quota_multiplier if use.over_quota else ONE
        gpu_cost = (seconds * unit_price * multiplier / SECONDS_PER_HOUR).quantize(COST_PLACES)
        energy_price = card.energy_price_per_kwh
        energy_cost = (energy_kwh * energy_price).quantize(COST_PLACES) if energy_price else ZERO
    return (
        period_id, use.team_id, use.source, use.source_id, gpu_id, model_id,
        _instant(piece_start), _instant(piece_end), seconds, busy_seconds, energy_kwh,
        card.pk if card else None, unit_price, use.over_quota,
        gpu_cost, energy_cost, gpu_cost + energy_cost, created,
    )  # fmt: skip
