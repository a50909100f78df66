"""Telemetry that arrives after its hour was charged (an agent flushing its buffer after a broker
outage, rollups recomputed) corrects an open month with appended correction rows, is never
charged twice, and leaves a closed month exactly as it was."""

from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.db.models import Sum

from apps.billing import metering, tasks
from apps.billing.choices import ChargeSource
from apps.billing.exports import team_totals
from apps.billing.metering import meter_interval
from apps.billing.models import BillingPeriod, LedgerEntry
from apps.billing.services import period_close
from apps.fleet.models import Gpu
from apps.telemetry.models import GpuHourRollup
from portal import hooks
from tests.billing.conftest import AFTER_NOV, DEC, NOV
from tests.billing.test_metering import book

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
START = NOV + timedelta(days=9, hours=10)  # a 2 h booking, 10:00-12:00 on the 10th
ENERGY_PRICE = Decimal("0.30")


@pytest.fixture
def booked(team, member, fleet, rates):
    rates["h100"].energy_price_per_kwh = ENERGY_PRICE
    rates["h100"].save()
    gpu = Gpu.objects.filter(node__hostname="h100-a").first()
    reservation = book(team, member, [gpu], START, START + 2 * H)
    return gpu, reservation


def late_rollups(gpu, busy_seconds: float, kwh: float) -> None:
    for hour in range(2):
        GpuHourRollup.objects.update_or_create(
            gpu=gpu,
            bucket=START + hour * H,
            defaults={"samples": 240, "busy_seconds": busy_seconds, "energy_j": kwh * 3_600_000},
        )


def booking_figures(reservation) -> dict:
    return LedgerEntry.objects.filter(
        source=ChargeSource.RESERVATION, source_id=reservation.pk
    ).aggregate(
        seconds=Sum("gpu_seconds"), busy=Sum("busy_seconds"), kwh=Sum("energy_kwh"),
        gpu_cost=Sum("gpu_cost"), energy_cost=Sum("energy_cost"), idle_cost=Sum("idle_cost"),
        cost=Sum("cost"),
    )  # fmt: skip


def test_late_telemetry_corrects_an_open_month_once(booked, team):
    gpu, reservation = booked
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)  # charged before any telemetry came
    charged = {e.pk: (e.busy_seconds, e.energy_kwh, e.cost) for e in LedgerEntry.objects.all()}
    before = booking_figures(reservation)
    assert before["busy"] == 0 and before["energy_cost"] == 0
    assert before["idle_cost"] == before["gpu_cost"] == Decimal("5.00")  # all idle, 2 h x 2.50

    late_rollups(gpu, busy_seconds=2700, kwh=0.5)  # 45 busy minutes and 0.5 kWh each hour
    result = meter_interval(start=NOV, end=DEC, now=AFTER_NOV)

    after = booking_figures(reservation)
    assert after["seconds"] == before["seconds"] == 7200  # time is not charged again
    assert after["gpu_cost"] == before["gpu_cost"]
    assert after["busy"] == 2 * 2700
    assert after["kwh"] == Decimal("1.0")
    assert after["energy_cost"] == Decimal("1.0") * ENERGY_PRICE
    assert after["idle_cost"] == Decimal("5.00") * 900 / 3600
    assert after["cost"] == Decimal("5.00") + Decimal("0.30")
    # The charges are untouched; the difference is in appended correction rows.
    assert {
        e.pk: (e.busy_seconds, e.energy_kwh, e.cost)
        for e in LedgerEntry.objects.filter(pk__in=charged)
    } == charged
    corrections = LedgerEntry.objects.filter(revision__gt=0)
    assert result.corrected == corrections.count() == 2
    assert {c.gpu_seconds for c in corrections} == {0}
    # The page shows the corrected split.
    row = next(t for t in team_totals(BillingPeriod.objects.get()) if t["team_id"] == team.pk)
    assert row["busy_gpu_hours"] == Decimal("1.5") and row["held_idle_gpu_hours"] == Decimal("0.5")
    assert row["held_idle_cost"] == Decimal("1.25") and row["cost"] == Decimal("5.30")

    again = meter_interval(start=NOV, end=DEC, now=AFTER_NOV)  # nothing new: nothing booked
    assert again.inserted == again.corrected == 0

    late_rollups(gpu, busy_seconds=3600, kwh=0.25)  # rollups recomputed: busier, less energy
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    final = booking_figures(reservation)
    assert final["busy"] == 7200 and final["idle_cost"] == 0
    assert final["kwh"] == Decimal("0.5") and final["cost"] == Decimal("5.15")
    assert LedgerEntry.objects.filter(revision=2).count() == 2


def test_late_telemetry_leaves_a_closed_month_untouched(booked, finance_user):
    gpu, reservation = booked
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    period = period_close(actor=finance_user, period=BillingPeriod.objects.get(), now=AFTER_NOV)
    rows = list(LedgerEntry.objects.order_by("pk").values())
    late_rollups(gpu, busy_seconds=3600, kwh=2.0)

    result = meter_interval(start=NOV, end=DEC, now=AFTER_NOV)

    assert result.inserted == result.corrected == 0 and result.skipped_closed > 0
    assert list(LedgerEntry.objects.order_by("pk").values()) == rows
    assert booking_figures(reservation)["busy"] == 0
    period.refresh_from_db()
    assert period.is_closed


def test_hourly_run_corrects_late_telemetry_noted_in_any_hour_of_the_month(booked):
    gpu, reservation = booked
    ten_days_later = START + timedelta(days=10)  # far beyond the hourly look-back
    with mock.patch.object(metering.timezone, "now", return_value=ten_days_later):
        tasks.meter()
        late_rollups(gpu, busy_seconds=3600, kwh=0.5)
        assert tasks.meter()["corrected"] == 0  # the hourly run never re-reads the month ...
        # ... but corrects the hours telemetry rolled up again (late samples).
        hooks.emit("telemetry.hours_rolled_up_again", start=START, end=START + 2 * H)
        outcome = tasks.meter()
    assert outcome["corrected"] == 2
    assert booking_figures(reservation)["busy"] == 7200
