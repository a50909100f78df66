"""Metering: what gets charged to whom, at which rate, and that re-runs change nothing."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from apps.billing.choices import ChargeSource
from apps.billing.metering import meter_interval
from apps.billing.models import LedgerEntry
from apps.fleet.models import Gpu
from apps.reservations.choices import ReservationStatus
from apps.telemetry.models import GpuHourRollup
from tests.billing.conftest import AFTER_NOV, DEC, NOV
from tests.factories import make_booking

pytestmark = pytest.mark.django_db


def book(team, user, gpus, start, end, *, over_quota=False):
    return make_booking(
        team, user, gpus, start, end, status=ReservationStatus.COMPLETED, over_quota=over_quota
    )


def total(**filters) -> Decimal:
    return LedgerEntry.objects.filter(**filters).aggregate(t=Sum("cost"))["t"] or Decimal(0)


def test_booking_is_charged_to_its_team_and_the_rest_to_the_platform(team, member, fleet, rates):
    gpu = Gpu.objects.filter(node__hostname="h100-a").first()
    start = NOV + timedelta(days=3, hours=10, minutes=30)
    book(team, member, [gpu], start, start + timedelta(hours=2))  # 10:30 -> 12:30

    result = meter_interval(start=NOV, end=DEC, now=AFTER_NOV)

    entries = LedgerEntry.objects.filter(source=ChargeSource.RESERVATION)
    assert sorted(e.gpu_seconds for e in entries) == [1800, 1800, 3600]  # cut at the hours
    assert {e.team_id for e in entries} == {team.pk}
    assert total(source=ChargeSource.RESERVATION) == Decimal("5.00")  # 2 h x 2.50
    fleet_hours = 20 * 720
    h100_cost = Decimal(16 * 720) * Decimal("2.50")
    l40s_cost = Decimal(4 * 720) * Decimal("0.90")
    assert total() == h100_cost + l40s_cost
    assert LedgerEntry.objects.aggregate(s=Sum("gpu_seconds"))["s"] == fleet_hours * 3600
    assert result.inserted == LedgerEntry.objects.count()


def test_rerunning_any_interval_inserts_nothing_twice(team, member, fleet, rates):
    gpu = Gpu.objects.filter(node__hostname="h100-a").first()
    start = NOV + timedelta(days=1, hours=5, minutes=10)
    book(team, member, [gpu], start, start + timedelta(hours=30))
    meter_interval(start=NOV, end=NOV + timedelta(days=2), now=AFTER_NOV)
    first = (LedgerEntry.objects.count(), total())

    again = meter_interval(start=NOV + timedelta(hours=7), end=NOV + timedelta(days=1, hours=9),
                           now=AFTER_NOV)  # fmt: skip
    assert again.inserted == 0
    assert (LedgerEntry.objects.count(), total()) == first


def test_over_quota_use_pays_the_multiplier(team, member, fleet, rates):
    gpu = Gpu.objects.filter(node__hostname="h100-b").first()
    start = NOV + timedelta(days=5)
    book(team, member, [gpu], start, start + timedelta(hours=4), over_quota=True)
    meter_interval(start=start, end=start + timedelta(hours=4), now=AFTER_NOV)
    assert total(source=ChargeSource.RESERVATION) == Decimal("15.00")  # 4 h x 2.50 x 1.5
    assert LedgerEntry.objects.filter(source=ChargeSource.RESERVATION, over_quota=True).count() == 4


def test_a_rate_change_mid_hour_splits_the_slice(team, member, fleet, rates, h100):
    from apps.billing.models import RateCard

    change = NOV + timedelta(days=10, hours=12, minutes=20)
    rates["h100"].effective_to = change
    rates["h100"].save()
    RateCard.objects.create(
        gpu_model=h100, price_per_gpu_hour=Decimal("3.60"), effective_from=change
    )
    gpu = Gpu.objects.filter(node__hostname="h100-a").first()
    book(team, member, [gpu], change - timedelta(hours=1), change + timedelta(hours=1))
    meter_interval(start=NOV + timedelta(days=10), end=NOV + timedelta(days=11), now=AFTER_NOV)
    # 1 h at 2.50 then 1 h at 3.60, cut at 11:20, 12:00, 12:20, 13:00
    assert total(source=ChargeSource.RESERVATION) == Decimal("6.10")
    assert LedgerEntry.objects.filter(source=ChargeSource.RESERVATION).count() == 4


def test_busy_time_and_energy_come_from_rollups(team, member, fleet, rates):
    rates["h100"].energy_price_per_kwh = Decimal("0.20")
    rates["h100"].save()
    gpu = Gpu.objects.filter(node__hostname="h100-a").first()
    hour = NOV + timedelta(days=2, hours=8)
    book(team, member, [gpu], hour, hour + timedelta(minutes=30))
    GpuHourRollup.objects.create(
        gpu=gpu, bucket=hour, samples=240, busy_seconds=1800, energy_j=3_600_000 * 0.6
    )
    meter_interval(start=hour, end=hour + timedelta(hours=1), now=AFTER_NOV)
    held = LedgerEntry.objects.get(source=ChargeSource.RESERVATION)
    assert held.gpu_seconds == 1800 and held.busy_seconds == 900  # prorated to half the hour
    assert held.energy_kwh == Decimal("0.300000")
    assert held.energy_cost == Decimal("0.06")
    assert held.cost == Decimal("1.25") + Decimal("0.06")


def test_the_current_hour_is_never_charged(team, member, fleet, rates):
    now = NOV + timedelta(days=1, hours=3, minutes=40)
    result = meter_interval(start=NOV + timedelta(days=1), end=now + timedelta(hours=5), now=now)
    assert result.end == NOV + timedelta(days=1, hours=3)
    assert not LedgerEntry.objects.filter(slice_end__gt=result.end).exists()
