"""Powered-off capacity: metering charges none of a powered-down node's time as unallocated, and
the energy it saved is its GPUs' measured idle draw x hours off, priced at the energy tariff."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from apps.billing.choices import ChargeSource
from apps.billing.energy import powered_off_by_gpu_day, powered_off_by_model
from apps.billing.metering import meter_interval
from apps.billing.models import LedgerEntry, RateCard
from apps.fleet.choices import PowerState
from apps.fleet.models import NodePowerEvent
from apps.telemetry.models import GpuHourRollup
from tests.billing.conftest import AFTER_NOV, NOV
from tests.factories import GpuFactory, GpuModelFactory, NodeFactory

pytestmark = pytest.mark.django_db
DAY = NOV + timedelta(days=4)  # the 5th


@pytest.fixture
def node():
    """A B200 node of two GPUs (4.00 per GPU-hour, energy 0.30 per kWh) that idled at 60 W and
    80 W per GPU the day before (a busy hour at 300 W does not count)."""
    model = GpuModelFactory(name="B200")
    RateCard.objects.create(gpu_model=model, price_per_gpu_hour=Decimal("4.00"),
                            energy_price_per_kwh=Decimal("0.30"),
                            effective_from=NOV - timedelta(days=90))  # fmt: skip
    node = NodeFactory(hostname="b200-a")
    for index, watts in enumerate((60.0, 80.0)):
        gpu = GpuFactory(node=node, index=index, model=model, uuid=f"GPU-b200-a-{index}",
                         in_fleet_since=NOV - timedelta(days=30))  # fmt: skip
        for hour, (busy, power) in enumerate([(0.0, watts), (0.0, watts), (3600.0, 300.0)]):
            GpuHourRollup.objects.create(
                gpu=gpu, bucket=DAY - timedelta(hours=10 - hour), samples=60, busy_seconds=busy,
                power_avg_w=power,
            )  # fmt: skip
    return node


def power(node, changes):
    """The node's power history: (hours after DAY's midnight, from state, to state)."""
    for hours, before, after in changes:
        NodePowerEvent.objects.create(node=node, from_state=before, to_state=after,
                                      at=DAY + timedelta(hours=hours))  # fmt: skip


OFF_10_TO_14 = [
    (10, PowerState.ON, PowerState.SUSPENDING),
    (10.25, PowerState.SUSPENDING, PowerState.OFF),
    (13.75, PowerState.OFF, PowerState.RESUMING),
    (14, PowerState.RESUMING, PowerState.ON),
]


def test_powered_off_hours_are_not_charged_as_unallocated(node):
    power(node, OFF_10_TO_14)
    meter_interval(start=DAY, end=DAY + timedelta(days=1), now=AFTER_NOV)
    rows = LedgerEntry.objects.filter(gpu__node=node)
    assert set(rows.values_list("source", flat=True)) == {ChargeSource.UNALLOCATED}
    # 24 h less the 4 h powered down (10:00-14:00, suspending to resumed), for both GPUs.
    assert rows.aggregate(s=Sum("gpu_seconds"))["s"] == 2 * 20 * 3600
    assert rows.aggregate(c=Sum("cost"))["c"] == Decimal("160.00")  # 40 GPU-h x 4.00
    assert not rows.filter(slice_start__lt=DAY + timedelta(hours=14),
                           slice_end__gt=DAY + timedelta(hours=10)).exists()  # fmt: skip


def test_energy_saved_is_the_measured_idle_draw_times_hours_off(node):
    power(node, OFF_10_TO_14)
    [b200] = powered_off_by_model(DAY, DAY + timedelta(days=1))
    assert b200.gpu_model == "B200" and b200.gpu_hours == Decimal(8)
    # (60 W + 80 W) x 4 h = 0.56 kWh, at 0.30 per kWh = 0.168.
    assert b200.energy_saved_kwh == Decimal("0.56")
    assert b200.energy_saved_cost == Decimal("0.168")
    assert b200.unmeasured_gpus == 0


def test_a_gpu_never_measured_idle_saves_nothing_and_is_counted(node):
    GpuFactory(node=node, index=2, model=node.gpus.first().model, uuid="GPU-b200-a-2",
               in_fleet_since=NOV - timedelta(days=30))  # fmt: skip
    power(node, OFF_10_TO_14)
    [b200] = powered_off_by_model(DAY, DAY + timedelta(days=1))
    assert b200.gpu_hours == Decimal(12) and b200.energy_saved_kwh == Decimal("0.56")
    assert b200.unmeasured_gpus == 1


def test_a_night_off_is_cut_at_midnight_per_gpu_day(node):
    power(node, [(22, PowerState.ON, PowerState.OFF), (27, PowerState.OFF, PowerState.ON)])
    days = powered_off_by_gpu_day(DAY, DAY + timedelta(days=2))
    first = days[("GPU-b200-a-0", date(2026, 11, 5))]
    second = days[("GPU-b200-a-0", date(2026, 11, 6))]
    assert (first.gpu_hours, second.gpu_hours) == (Decimal(2), Decimal(3))
    assert first.energy_saved_kwh == Decimal("0.12")  # 60 W x 2 h
    assert days[("GPU-b200-a-1", date(2026, 11, 6))].energy_saved_kwh == Decimal("0.24")
    assert len(days) == 4


def test_a_node_never_powered_down_saves_nothing(node):
    assert powered_off_by_model(DAY, DAY + timedelta(days=1)) == []
    meter_interval(start=DAY, end=DAY + timedelta(days=1), now=AFTER_NOV)
    total = LedgerEntry.objects.filter(gpu__node=node).aggregate(s=Sum("gpu_seconds"))["s"]
    assert total == 2 * 24 * 3600
