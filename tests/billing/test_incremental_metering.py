"""The hourly metering run is incremental: it charges the hours that just ended and corrects
only the hours late telemetry touched (noted by telemetry's late-sample path), never the whole
month, and it ends where a full re-meter of the month would, to the cent."""

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import Max, Sum

from apps.billing.exports import team_totals
from apps.billing.metering import meter_hourly, meter_interval
from apps.billing.models import BillingPeriod, LedgerEntry, RemeterRange
from apps.fleet.models import Gpu
from apps.telemetry.ingest import telemetry_ingest_many
from apps.telemetry.models import GpuHourRollup, LateSampleRange
from apps.telemetry.rollups import rollup_late
from portal import hooks
from tests.billing.conftest import NOV
from tests.billing.test_metering import book
from tests.telemetry.conftest import batch, sample

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
DAY_28 = NOV + timedelta(days=27, hours=10)  # the run at 10:05 on the 28th charges 09:00-10:00
LATE_HOUR = NOV + timedelta(days=9, hours=10)  # 10:00 on the 10th, long charged
# Samples are kept a week: late ones that still arrive are from the last few days.
LATE_SAMPLES_HOUR = NOV + timedelta(days=23, hours=10)


@pytest.fixture
def gpu(fleet):
    return Gpu.objects.filter(node__hostname="h100-a").order_by("index").first()


@pytest.fixture
def charged_to_day_28(team, member, fleet, rates, gpu):
    """A booking over the whole month on one H100, the month charged up to 09:00 on the 28th
    (the runs before this one)."""
    rates["h100"].energy_price_per_kwh = Decimal("0.30")
    rates["h100"].save()
    reservation = book(team, member, [gpu], NOV, NOV + timedelta(days=30))
    meter_interval(start=NOV, end=DAY_28 - H, now=DAY_28)
    return reservation


def ledger_snapshot() -> dict:
    return {row["id"]: row for row in LedgerEntry.objects.values()}


def test_run_on_day_28_meters_only_the_last_hours(charged_to_day_28, gpu):
    before = ledger_snapshot()
    # Rollups of an old hour changed without telemetry's late-sample note: the hourly run does
    # not look there (it never re-reads the whole month) ...
    GpuHourRollup.objects.create(
        gpu=gpu, bucket=LATE_HOUR, samples=240, busy_seconds=3600, energy_j=3_600_000
    )

    result = meter_hourly(now=DAY_28 + timedelta(minutes=5), lookback_hours=3)

    assert result.intervals == [(DAY_28 - 3 * H, DAY_28)]
    new = LedgerEntry.objects.exclude(pk__in=before)
    assert new.count() == result.inserted == Gpu.objects.count()  # one row per GPU
    assert set(new.values_list("slice_start", flat=True)) == {DAY_28 - H}
    assert {pk: row for pk, row in ledger_snapshot().items() if pk in before} == before
    assert result.corrected == 0
    # ... and the full path (closing a month, repairs) does.
    full = meter_interval(start=NOV, end=DAY_28, now=DAY_28)
    assert full.corrected == 1
    assert LedgerEntry.objects.get(revision=1).slice_start == LATE_HOUR


def test_late_samples_in_an_old_hour_remeter_only_that_hour(charged_to_day_28, gpu):
    meter_hourly(now=DAY_28 + timedelta(minutes=5))
    before = ledger_snapshot()
    late = LATE_SAMPLES_HOUR + timedelta(minutes=20)
    samples = [sample(gpu.uuid, late.timestamp() + s, util=90) for s in range(0, 600, 15)]
    telemetry_ingest_many(batches=[batch(1, samples)], now=DAY_28 + timedelta(minutes=30))
    assert LateSampleRange.objects.count() == 1

    rollup_late()  # telemetry rolls the hour up again and tells billing
    assert list(RemeterRange.objects.values_list("start", flat=True)) == [LATE_SAMPLES_HOUR]
    result = meter_hourly(now=DAY_28 + timedelta(minutes=65))

    assert result.intervals[1:] == [(LATE_SAMPLES_HOUR, LATE_SAMPLES_HOUR + H)]
    assert result.intervals[0][0] >= DAY_28 - 3 * H  # the regular window, not the month
    new = LedgerEntry.objects.exclude(pk__in=before)
    corrections = new.filter(revision__gt=0)
    assert corrections.count() == result.corrected == 1
    correction = corrections.get()
    assert (correction.slice_start, correction.gpu_id) == (LATE_SAMPLES_HOUR, gpu.pk)
    assert correction.busy_seconds > 0 and correction.gpu_seconds == 0
    # Every other new row is a charge of the hour that just ended; nothing else was touched.
    assert set(new.filter(revision=0).values_list("slice_start", flat=True)) == {DAY_28}
    assert {pk: row for pk, row in ledger_snapshot().items() if pk in before} == before
    assert not RemeterRange.objects.exists()  # noted once, corrected once
    assert meter_hourly(now=DAY_28 + timedelta(minutes=65)).corrected == 0


def slice_sums() -> dict:
    rows = LedgerEntry.objects.values("slice_start", "gpu_id", "source", "source_id").annotate(
        busy=Sum("busy_seconds"), kwh=Sum("energy_kwh"), cost=Sum("cost"), idle=Sum("idle_cost")
    )
    return {
        (r["slice_start"], r["gpu_id"], r["source"], r["source_id"]): r for r in rows.order_by()
    }


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_incremental_runs_end_where_a_full_remeter_does(
    seed, team, other_team, member, fleet, rates
):
    """Random bookings, hourly runs, and late rollups of random old ranges (noted the way
    telemetry notes them): afterwards a full re-meter of the month finds nothing to correct,
    and every team's total is the same to the cent."""
    rng = random.Random(seed)
    rates["h100"].energy_price_per_kwh = Decimal("0.27")
    rates["h100"].save()
    gpus = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index")[:4])
    for gpu in gpus:
        start = NOV + rng.randrange(0, 20) * H + timedelta(minutes=rng.choice((0, 15, 40)))
        book(rng.choice((team, other_team)), member, [gpu], start, start + rng.randrange(2, 30) * H)
    day_3 = NOV + timedelta(days=2)
    for hours in range(0, 48, 6):  # the runs of the first two days, every few hours
        meter_hourly(now=NOV + hours * H + timedelta(minutes=5))

    for _ in range(rng.randrange(2, 5)):  # late telemetry of random ranges, some overlapping
        first = NOV + rng.randrange(0, 46) * H
        length = rng.randrange(1, 4)
        for offset in range(length):
            GpuHourRollup.objects.update_or_create(
                gpu=rng.choice(gpus),
                bucket=first + offset * H,
                defaults={
                    "samples": 240,
                    "busy_seconds": rng.uniform(0, 3600),
                    "energy_j": rng.uniform(0, 2_500_000),
                },
            )
        late = first + timedelta(minutes=rng.randrange(0, 60))
        hooks.emit("telemetry.hours_rolled_up_again", start=late, end=first + length * H)
    incremental = meter_hourly(now=day_3 + timedelta(minutes=5))
    assert incremental.corrected > 0
    sums, totals = slice_sums(), team_totals(BillingPeriod.objects.get(month=NOV.date()))

    full = meter_interval(start=NOV, end=day_3, now=day_3)

    assert full.inserted == full.corrected == 0
    assert slice_sums() == sums
    assert team_totals(BillingPeriod.objects.get(month=NOV.date())) == totals
    assert LedgerEntry.objects.aggregate(Max("slice_start"))["slice_start__max"] == day_3 - H


def test_a_run_after_a_pause_catches_up_from_where_the_ledger_stopped(charged_to_day_28):
    result = meter_hourly(now=DAY_28 + timedelta(hours=10, minutes=5), lookback_hours=3)
    assert result.intervals == [(DAY_28 - H, DAY_28 + 10 * H)]
    assert BillingPeriod.objects.get().metered_until == DAY_28 + 10 * H


def test_meter_month_command_re_meters_a_whole_month(charged_to_day_28, capsys):
    call_command("meter_month", "2026-11")
    assert "rows charged" in capsys.readouterr().out
    assert BillingPeriod.objects.get().metered_until == NOV + timedelta(days=30)
    with pytest.raises(CommandError, match="YYYY-MM"):
        call_command("meter_month", "November")
