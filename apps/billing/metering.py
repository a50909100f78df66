"""Metering: turn GPU holdings into append-only ledger entries.

What is charged, per GPU, over complete UTC hours:
- reservations, for their reserved time (active holdings), to the booking team;
- jobs that run outside a reservation, for their allocations' run time, to the job's team;
- every other second of every GPU while it is in the fleet (from `in_fleet_since` until
  `retired_at`; never a MIG slice) and its node is powered on, as unallocated capacity, to the
  platform cost center. Time a node spent powered down to save energy is not charged
  (`energy.powered_off_spans`; `energy` reports it and what it saved).
So, for any interval, team charges + platform idle = powered-on fleet GPU-seconds x rates.

Time is cut into slices at every UTC hour and wherever a rate card starts or ends, so the same
use always produces the same slices whatever interval a run covers; the ledger's unique key
(source, source id, GPU, slice start) makes re-runs insert nothing twice. Only complete hours
(before the current one) are charged, so a slice is never written half-done.

Cost keeps full precision (10 decimal places): GPU cost = seconds x price / 3600 (x the
over-quota multiplier for work above the guarantee), energy cost = kWh x energy price, where
busy seconds and energy come from the hour rollups, prorated to the slice. A booking's
`idle_cost` is the share of its GPU cost the GPU sat idle.

Late telemetry. Rollups of an hour can arrive or change after the hour was charged (an agent
flushing its buffer after a broker outage, rollups recomputed). Every run therefore also
re-derives the telemetry figures (busy seconds, energy, energy cost, idle cost) of the slices it
covers that are already charged, and where they differ appends a correction row (revision 1,
2, ...: no GPU seconds or GPU cost, only the differences). Charges are never edited, the
differences are booked once, and slices of a closed period are left alone.

The hourly run (`meter_hourly`) is incremental, so its cost does not grow through the month: it
charges the hours that ended since the last run (re-checking the last few, whose rollups may
have been completed meanwhile) and corrects only the hours that late telemetry touched (the
`RemeterRange` notes billing keeps when telemetry rolls hours up again), never the whole month.
`meter_interval` over a whole month stays the full path (closing a month, repairs:
`manage.py meter_month`).
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import lru_cache

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Sum
from django.utils import timezone

from apps.billing import energy
from apps.billing.choices import ChargeSource
from apps.billing.models import BillingPeriod, LedgerEntry, RemeterRange
from apps.billing.money import ExactSum
from apps.billing.periods import month_bounds, month_start
from apps.billing.pricing import RateBook, energy_cost, gpu_cost
from apps.fleet.choices import GpuStatus
from apps.fleet.models import Gpu
from apps.jobs.holdings import allocations_holding
from apps.reservations.holdings import bookings_holding
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
    "idle_cost",
    "cost",
    "revision",
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
    corrected: int = 0  # correction rows appended for telemetry that changed after charging
    skipped_closed: int = 0  # slices that fall in a closed period and were not charged
    periods: list[int] = field(default_factory=list)
    # The intervals metered, in order (one for `meter_interval`; `meter_hourly` adds one per
    # range that late telemetry touched).
    intervals: list[tuple[datetime, datetime]] = field(default_factory=list)

    def add(self, other: "MeterResult") -> None:
        self.start, self.end = min(self.start, other.start), max(self.end, other.end)
        self.inserted += other.inserted
        self.corrected += other.corrected
        self.skipped_closed += other.skipped_closed
        self.periods += [pk for pk in other.periods if pk not in self.periods]
        self.intervals += other.intervals


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


@lru_cache(maxsize=65536)
def _instant(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def meter_interval(*, start: datetime, end: datetime, now: datetime | None = None) -> MeterResult:
    """Charge all GPU use in [start, end), widened to whole hours and cut at the last complete
    hour, and correct the telemetry figures of slices already charged there (see the module
    docstring). Idempotent: running it again, or over an overlapping interval, inserts nothing
    twice. Slices in a closed period are neither charged nor corrected (counted in
    `skipped_closed`). Runs are serialized (a database lock), so concurrent runs cannot race."""
    now = now or timezone.now()
    start = floor_hour(start)
    end = min(floor_hour(end + HOUR - timedelta(microseconds=1)), floor_hour(now))
    result = MeterResult(start=start, end=end)
    if end <= start:
        return result
    result.intervals.append((start, end))
    with transaction.atomic():
        _serialize_metering()
        periods = _periods_for(start, end)
        result.periods = [p.pk for p in periods]
        rows = _ledger_rows(start, end, periods, result)
        # Every row is new: its key was looked up under the lock (a charge not yet there, or a
        # correction numbered after the last one), so PostgreSQL may COPY straight in.
        result.inserted = insert_ignoring_duplicates(
            LedgerEntry._meta.db_table,
            LEDGER_COLUMNS,
            rows,
            conflict=("slice_start", "gpu_id", "source", "source_id", "revision"),
            known_new=True,
        )
        for period in periods:
            if not period.is_closed and (
                period.metered_until is None or period.metered_until < end
            ):
                period.metered_until = min(end, month_bounds(period.month)[1])
                period.save(update_fields=["metered_until"])
    return result


REMETER_RANGES_PER_RUN = 200


def meter_hourly(*, now: datetime | None = None, lookback_hours: int | None = None) -> MeterResult:
    """The hourly run: charge the hours that ended since the last run, re-checking the last
    `lookback_hours` (BILLING_METER_LOOKBACK_HOURS; an hour's rollup is completed a few minutes
    after it ends), then correct the hours that late telemetry touched (`RemeterRange` notes,
    oldest first) and forget those notes. Never the whole month: its cost depends on the hours
    since the last run and the late ranges, not on the day of the month. After a pause it
    catches up from where the ledger stopped (the latest period's `metered_until`)."""
    now = now or timezone.now()
    if lookback_hours is None:
        lookback_hours = settings.BILLING_METER_LOOKBACK_HOURS
    end = floor_hour(now)
    start = end - max(lookback_hours, 1) * HOUR
    with transaction.atomic():
        _serialize_metering()
        start = min(start, _charged_until(start))
        notes = list(RemeterRange.objects.filter(start__lt=end)[:REMETER_RANGES_PER_RUN])
        result = meter_interval(start=start, end=end, now=now)
        for range_start, range_end in _uncovered(notes, start):
            result.add(meter_interval(start=range_start, end=range_end, now=now))
        RemeterRange.objects.filter(pk__in=[note.pk for note in notes]).delete()
    return result


def _charged_until(start: datetime) -> datetime:
    """Where the ledger's charges stop: the latest `metered_until` of any period, or (nothing
    metered yet) the start of `start`'s month."""
    latest = BillingPeriod.objects.aggregate(until=Max("metered_until"))["until"]
    if latest is None:
        return month_bounds(month_start(start))[0]
    return latest


def _uncovered(notes: list, covered_from: datetime) -> list[tuple[datetime, datetime]]:
    """The noted ranges widened to whole hours, merged, and cut short where the regular run
    (from `covered_from` on) meters them anyway."""
    merged: list[list[datetime]] = []
    for note in notes:
        start = floor_hour(note.start)
        end = min(floor_hour(note.end + HOUR - timedelta(microseconds=1)), covered_from)
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def note_hours_rolled_up_again(*, start: datetime, end: datetime, **_) -> None:
    """Subscriber of telemetry's `telemetry.hours_rolled_up_again`: note the hours so the next
    hourly run corrects their charges."""
    RemeterRange.objects.create(start=floor_hour(start), end=max(end, floor_hour(start) + HOUR))


def _serialize_metering() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [METERING_LOCK])


def _ledger_rows(start: datetime, end: datetime, periods: list, result: MeterResult):
    """Every ledger row of [start, end), as a generator of tuples in LEDGER_COLUMNS order.
    Everything is read here, before the generator starts: the caller's COPY holds the
    connection while the generator runs, so the generator itself must not query."""
    start_s, end_s = _epoch(start), _epoch(end)
    rates = RateBook()
    rollups = _rollups(start, end)
    charged = _charged(start, end)
    gpu_uses = list(_uses_per_gpu(start, end))
    period_of = {}
    for period in periods:
        first, last = (_epoch(t) for t in month_bounds(period.month))
        for hour in range(max(first, start_s), min(last, end_s), 3600):
            period_of[hour] = period
    created = timezone.now()

    def rows():
        for gpu_id, model_id, fleet_window, uses in gpu_uses:
            cuts = rates.cuts(model_id)
            for use in _with_unallocated(uses, start_s, end_s, fleet_window):
                if use.source == POWERED_OFF:
                    continue  # not capacity while off: charged to no one
                for piece_start, piece_end in _slices(use.start, use.end, cuts):
                    hour = piece_start - piece_start % 3600
                    period = period_of[hour]
                    if period.is_closed:
                        result.skipped_closed += 1
                        continue
                    row = _ledger_row(
                        period.pk, gpu_id, model_id, use, piece_start, piece_end,
                        rates.card_at(model_id, piece_start), rollups.get((gpu_id, hour)), created,
                    )  # fmt: skip
                    before = charged.get((piece_start, gpu_id, use.source, use.source_id))
                    if before is None:
                        yield row
                        continue
                    correction = _correction(row, before)
                    if correction is not None:
                        result.corrected += 1
                        yield correction

    return rows()


# Positions in a ledger row tuple (LEDGER_COLUMNS order) of what telemetry decides.
BUSY, ENERGY, GPU_COST, ENERGY_COST, IDLE_COST, COST, REVISION = (
    LEDGER_COLUMNS.index(name)
    for name in (
        "busy_seconds", "energy_kwh", "gpu_cost", "energy_cost", "idle_cost", "cost", "revision"
    )
)  # fmt: skip
SECONDS = LEDGER_COLUMNS.index("gpu_seconds")


def _charged(start: datetime, end: datetime) -> dict:
    """What the ledger already says about each slice charged in [start, end), corrections
    included: {(slice start, gpu, source, source id): (busy s, kWh, energy cost, idle cost,
    last revision)}."""
    rows = (
        LedgerEntry.objects.filter(slice_start__gte=start, slice_start__lt=end)
        .exclude(source=ChargeSource.ADJUSTMENT)
        .values("slice_start", "gpu_id", "source", "source_id")
        .annotate(
            busy=Sum("busy_seconds"),
            kwh=ExactSum("energy_kwh", places=6),
            energy_cost=ExactSum("energy_cost"),
            idle_cost=ExactSum("idle_cost"),
            revision=Max("revision"),
        )
        .order_by()
    )
    return {
        (_epoch(r["slice_start"]), r["gpu_id"], r["source"], r["source_id"]): (
            r["busy"], r["kwh"], r["energy_cost"], r["idle_cost"], r["revision"]
        )
        for r in rows
    }  # fmt: skip


def _correction(row: tuple, before: tuple) -> tuple | None:
    """The row that brings a charged slice's telemetry figures to what `row` says now, or None
    when they already agree. It carries only differences: no GPU seconds, no GPU cost."""
    busy, kwh, energy_cost, idle_cost, revision = before
    if (row[BUSY], row[ENERGY], row[ENERGY_COST], row[IDLE_COST]) == (
        busy, kwh, energy_cost, idle_cost
    ):  # fmt: skip
        return None
    correction = list(row)
    correction[SECONDS] = 0
    correction[BUSY] = row[BUSY] - busy
    correction[ENERGY] = row[ENERGY] - kwh
    correction[GPU_COST] = ZERO
    correction[ENERGY_COST] = row[ENERGY_COST] - energy_cost
    correction[IDLE_COST] = row[IDLE_COST] - idle_cost
    correction[COST] = correction[ENERGY_COST]
    correction[REVISION] = revision + 1
    return tuple(correction)


def _periods_for(start: datetime, end: datetime) -> list[BillingPeriod]:
    periods = []
    month = month_start(start)
    while month_bounds(month)[0] < end:
        periods.append(BillingPeriod.objects.get_or_create(month=month)[0])
        month = month_bounds(month)[1].date()
    return periods


def _rollups(start: datetime, end: datetime) -> dict:
    rows = GpuHourRollup.objects.filter(bucket__gte=start, bucket__lt=end).values_list(
        "gpu_id", "bucket", "busy_seconds", "energy_j"
    )
    return {(gpu_id, _epoch(bucket)): (busy, energy) for gpu_id, bucket, busy, energy in rows}


def _uses_per_gpu(start: datetime, end: datetime):
    """(gpu id, model id, fleet window, [Use sorted by start]) for every GPU that matters; the
    fleet window is the (start, end) in epoch seconds of its time in the fleet, or None."""
    uses: dict[int, list[Use]] = defaultdict(list)
    holdings = (
        bookings_holding(start, end)
        .values_list(
            "gpu_id", "start", "end", "reservation_id", "reservation__team_id",
            "over_quota",
        )
    )  # fmt: skip
    for gpu_id, s, e, reservation_id, team_id, over_quota in holdings:
        uses[gpu_id].append(
            Use(_epoch(s), _epoch(e), ChargeSource.RESERVATION, reservation_id, team_id, over_quota)
        )
    for gpu_id, use in _job_uses(start, end):
        uses[gpu_id].append(use)
    for gpu_id, off_start, off_end in energy.powered_off_spans(start, end):
        uses[gpu_id].append(Use(off_start, off_end, POWERED_OFF, 0, None, False))
    gpus = Gpu.objects.values_list(
        "id", "model_id", "status", "mig_parent_id", "in_fleet_since", "retired_at"
    )
    for gpu_id, model_id, status, mig_parent_id, since, retired_at in gpus:
        window = _fleet_window(status, mig_parent_id, since, retired_at)
        in_interval = window is not None and window[0] < _epoch(end) and window[1] > _epoch(start)
        if in_interval or uses.get(gpu_id):
            yield gpu_id, model_id, window, sorted(uses.get(gpu_id, ()), key=lambda u: u.start)


FOREVER = 2**62
POWERED_OFF = "powered_off"  # a use that keeps a powered-down node's time out of unallocated


def _fleet_window(status, mig_parent_id, since, retired_at) -> tuple[int, int] | None:
    """[joined, left) of a GPU's capacity in epoch seconds; None for a MIG slice (its parent
    is the capacity) or a GPU retired at an unknown time."""
    if mig_parent_id is not None:
        return None
    if retired_at is None and status == GpuStatus.RETIRED:
        return None
    left = _epoch(retired_at) if retired_at is not None else FOREVER
    joined = _epoch(since)
    return (joined, left) if left > joined else None


def _job_uses(start: datetime, end: datetime):
    """Allocations of jobs that ran outside a reservation (a job inside one is already paid
    for by the booking). A running allocation is charged up to the end of the interval."""
    rows = allocations_holding(start, end, outside_bookings=True).values_list(
        "gpu_id", "start", "end", "job_id", "job__team_id", "over_quota"
    )
    for gpu_id, s, e, job_id, team_id, over_quota in rows:
        yield (
            gpu_id,
            Use(_epoch(s), _epoch(e or end), ChargeSource.JOB, job_id, team_id, over_quota),
        )


def _with_unallocated(uses: list[Use], start: int, end: int, fleet_window):
    """The uses clipped to [start, end) and made disjoint (an overlap is charged once, to the
    earlier use), with the gaps between them, inside the GPU's time in the fleet, as
    unallocated capacity."""
    cursor = start
    for use in uses:
        use_start, use_end = max(use.start, cursor), min(use.end, end)
        if use_end <= use_start:
            continue
        yield from _unallocated(cursor, use_start, fleet_window)
        yield Use(use_start, use_end, use.source, use.source_id, use.team_id, use.over_quota)
        cursor = use_end
    yield from _unallocated(cursor, end, fleet_window)


def _unallocated(start: int, end: int, fleet_window):
    if fleet_window is None:
        return
    start, end = max(start, fleet_window[0]), min(end, fleet_window[1])
    if start < end:
        yield Use(start, end, ChargeSource.UNALLOCATED, 0, None, False)


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
        unit_price, gpu_charge, energy_charge = ZERO, ZERO, ZERO
    else:
        unit_price = card.price_per_gpu_hour
        gpu_charge = gpu_cost(seconds, card, over_quota=use.over_quota)
        energy_charge = energy_cost(energy_kwh, card)
    idle_cost = ZERO
    if use.source == ChargeSource.RESERVATION and gpu_charge:
        idle_cost = (gpu_charge * (seconds - busy_seconds) / seconds).quantize(COST_PLACES)
    return (
        period_id, use.team_id, use.source, use.source_id, gpu_id, model_id,
        _instant(piece_start), _instant(piece_end), seconds, busy_seconds, energy_kwh,
        card.pk if card else None, unit_price, use.over_quota,
        gpu_charge, energy_charge, idle_cost, gpu_charge + energy_charge, 0, created,
    )  # fmt: skip
