"""Metering charges a GPU's unallocated capacity only while the GPU is in the fleet: from the
moment it joined, never after it retired, and nothing for a month before the fleet existed."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from apps.billing.choices import ChargeSource
from apps.billing.metering import meter_interval
from apps.billing.models import BillingPeriod, LedgerEntry, RateCard
from apps.billing.services import period_close
from apps.fleet.services import gpu_change_state
from tests.billing.conftest import AFTER_NOV, DEC, NOV
from tests.factories import GpuFactory, GpuModelFactory, NodeFactory

pytestmark = pytest.mark.django_db
DAY = NOV + timedelta(days=4)  # the 5th


def unallocated(gpu):
    return LedgerEntry.objects.filter(gpu=gpu, source=ChargeSource.UNALLOCATED)


def test_gpu_registered_at_10_32_is_charged_from_10_32(rates, h100):
    gpu = GpuFactory(model=h100, in_fleet_since=DAY + timedelta(hours=10, minutes=32))
    meter_interval(start=DAY, end=DAY + timedelta(days=1), now=AFTER_NOV)
    rows = unallocated(gpu).order_by("slice_start")
    assert rows[0].slice_start == DAY + timedelta(hours=10, minutes=32)
    assert rows[0].gpu_seconds == 28 * 60  # 10:32-11:00
    assert rows.aggregate(s=Sum("gpu_seconds"))["s"] == (24 * 60 - 632) * 60


def test_retired_gpu_is_not_charged_after_retirement(rates, h100, platform_admin):
    gpu = GpuFactory(model=h100, in_fleet_since=NOV - timedelta(days=30))
    gpu_change_state(gpu=gpu, operation="retire", actor=platform_admin)
    gpu.refresh_from_db()
    assert gpu.retired_at is not None  # retiring records when
    gpu.retired_at = DAY + timedelta(hours=6, minutes=15)
    gpu.save(update_fields=["retired_at"])
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    last = unallocated(gpu).order_by("slice_start").last()
    assert last.slice_end == DAY + timedelta(hours=6, minutes=15)
    assert unallocated(gpu).aggregate(s=Sum("gpu_seconds"))["s"] == (4 * 24 + 6.25) * 3600


def test_closing_a_month_before_the_fleet_existed_adds_no_rows(finance_user):
    model = GpuModelFactory(name="B200")
    RateCard.objects.create(
        gpu_model=model, price_per_gpu_hour=Decimal("4.00"), effective_from=NOV - timedelta(days=90)
    )
    node = NodeFactory()
    for index in range(4):
        GpuFactory(node=node, index=index, model=model, in_fleet_since=DEC + timedelta(hours=9))
    october = BillingPeriod.objects.create(month=(NOV - timedelta(days=1)).replace(day=1).date())
    period_close(actor=finance_user, period=october, now=AFTER_NOV)
    assert not LedgerEntry.objects.exists()
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)  # November: the fleet came in December
    assert not LedgerEntry.objects.exists()
