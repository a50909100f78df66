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

from django.apps import apps as django_apps
from django.db import transaction
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
    """Some source holding one GPU over [start, end)."""

    start: datetime
    end: datetime
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


def meter_interval(*, start: datetime, end: datetime, now: datetime | None = None) -> MeterResult:
    """Charge all GPU use in [start, end), widened to whole hours and cut at the last complete
    hour. Idempotent: running it again, or over an overlapping interval, inserts nothing twice.
    Slices in a closed period are not charged (counted in `skipped_closed`)."""
    now = now or timezone.now()
    start = floor_hour(start)
    end = min(floor_hour(end + HOUR - timedelta(microseconds=1)), floor_hour(now))
    result = MeterResult(start=start, end=end)
    if end <= start:
        return result
    periods = _periods_for(start, end)
    result.periods = [p.pk for p in periods.values()]
    rates = _RateBook(start, end)
    rollups = _rollups(start, end)
    created = timezone.now()

    # Read everything before writing: the COPY below holds the connection while rows() runs.
    gpu_uses = list(_uses_per_gpu(start, end))

    def rows():
        for gpu_id, model_id, in_fleet, uses in gpu_uses:
            for use in _with_unallocated(uses, start, end, in_fleet):
                for piece_start, piece_end in _slices(use.start, use.end, rates.cuts(model_id)):
                    period = periods[month_start(piece_start)]
                    if period.is_closed:
                        result.skipped_closed += 1
                        continue
                    card = rates.card_at(model_id, piece_start)
                    rollup = rollups.get((gpu_id, floor_hour(piece_start)))
                    yield _ledger_row(
                        period.pk, gpu_id, model_id, use, piece_start, piece_end, card, rollup,
                        created,
                    )  # fmt: skip

    result.inserted = insert_ignoring_duplicates(
        LedgerEntry._meta.db_table,
        LEDGER_COLUMNS,
        rows(),
        conflict=("source", "source_id", "gpu_id", "slice_start"),
    )
    open_ids = [p.pk for p in periods.values() if not p.is_closed]
    with transaction.atomic():
        for period in BillingPeriod.objects.select_for_update().filter(pk__in=open_ids):
            if period.metered_until is None or period.metered_until < end:
                period.metered_until = min(end, month_bounds(period.month)[1])
                period.save(update_fields=["metered_until"])
    return result


def _periods_for(start: datetime, end: datetime) -> dict:
    periods = {}
    month = month_start(start)
    while month_bounds(month)[0] < end:
        periods[month], _ = BillingPeriod.objects.get_or_create(month=month)
        month = month_bounds(month)[1].date()
    return periods


class _RateBook:
    """Rate cards per GPU model, and the instants where a model's price changes."""

    def __init__(self, start: datetime, end: datetime) -> None:
        self._cards: dict[int, list[RateCard]] = defaultdict(list)
        for card in RateCard.objects.order_by("effective_from"):
            self._cards[card.gpu_model_id].append(card)
        self._starts = {m: [c.effective_from for c in cards] for m, cards in self._cards.items()}
        self._cuts = {
            m: sorted({c.effective_from for c in cards} | {c.effective_to for c in cards} - {None})
            for m, cards in self._cards.items()
        }

    def cuts(self, model_id: int) -> list[datetime]:
        return self._cuts.get(model_id, [])

    def card_at(self, model_id: int, at: datetime) -> RateCard | None:
        index = bisect_right(self._starts.get(model_id, []), at) - 1
        if index < 0:
            return None
        card = self._cards[model_id][index]
        return card if card.effective_to is None or at < card.effective_to else None


def _rollups(start: datetime, end: datetime) -> dict:
    rows = GpuHourRollup.objects.filter(bucket__gte=start, bucket__lt=end).values_list(
        "gpu_id", "bucket", "busy_seconds", "energy_j"
    )
    return {(gpu_id, bucket): (busy, energy) for gpu_id, bucket, busy, energy in rows.iterator()}


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
            Use(s, e, ChargeSource.RESERVATION, reservation_id, team_id, over_quota)
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
        yield gpu_id, Use(s, e or end, ChargeSource.JOB, job_id, team_id, over_quota)


def _with_unallocated(uses: list[Use], start: datetime, end: datetime, in_fleet: bool):
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


def _slices(start: datetime, end: datetime, rate_cuts: list[datetime]):
    """[start, end) cut at every UTC hour and at every rate change."""
    cuts = [c for c in rate_cuts if start < c < end]
    piece_start = start
    while piece_start < end:
        next_cut = min(floor_hour(piece_start) + HOUR, end)
        while cuts and cuts[0] <= piece_start:
            cuts.pop(0)
        if cuts and cuts[0] < next_cut:
            next_cut = cuts[0]
        yield piece_start, next_cut
        piece_start = next_cut


def _ledger_row(period_id, gpu_id, model_id, use, piece_start, piece_end, card, rollup, created):
    seconds = int((piece_end - piece_start).total_seconds())
    busy, energy_j = rollup or (None, None)
    fraction = seconds / 3600
    busy_seconds = min(seconds, round((busy or 0) * fraction))
    energy_kwh = Decimal((energy_j or 0) * fraction / JOULES_PER_KWH).quantize(KWH_PLACES)
    unit_price = card.price_per_gpu_hour if card else Decimal(0)
    multiplier = card.over_quota_multiplier if card and use.over_quota else Decimal(1)
    gpu_cost = (seconds * unit_price * multiplier / SECONDS_PER_HOUR).quantize(COST_PLACES)
    energy_price = card.energy_price_per_kwh if card and card.energy_price_per_kwh else Decimal(0)
    energy_cost = (energy_kwh * energy_price).quantize(COST_PLACES)
    return (
        period_id, use.team_id, use.source, use.source_id, gpu_id, model_id,
        piece_start, piece_end, seconds, busy_seconds, energy_kwh,
        card.pk if card else None, unit_price, use.over_quota,
        gpu_cost, energy_cost, gpu_cost + energy_cost, created,
    )  # fmt: skip
