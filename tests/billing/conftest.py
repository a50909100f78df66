from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.billing.models import RateCard
from apps.fleet.models import GpuModel

# A closed past month the tests can meter in full: November 2026 (30 days, 720 hours).
NOV = datetime(2026, 11, 1, tzinfo=UTC)
DEC = datetime(2026, 12, 1, tzinfo=UTC)
AFTER_NOV = datetime(2026, 12, 2, 12, tzinfo=UTC)


@pytest.fixture
def l40s(fleet):
    return GpuModel.objects.get(name="L40S-48GB")


@pytest.fixture
def rates(h100, l40s):
    """H100 at 2.50/GPU-h (x1.5 over quota), L40S at 0.90/GPU-h, both from before November."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return {
        "h100": RateCard.objects.create(
            gpu_model=h100,
            price_per_gpu_hour=Decimal("2.50"),
            effective_from=start,
            over_quota_multiplier=Decimal("1.5"),
        ),
        "l40s": RateCard.objects.create(
            gpu_model=l40s, price_per_gpu_hour=Decimal("0.90"), effective_from=start
        ),
    }


@pytest.fixture
def november(team, member, fleet, rates):
    """vision books one H100 for 6 h on Nov 5 (6 x 2.50 = 15.00); November metered."""
    from apps.billing.metering import meter_interval
    from apps.billing.models import BillingPeriod
    from apps.reservations.choices import ReservationStatus
    from tests.factories import make_booking

    start = NOV + timedelta(days=4)
    gpu = fleet[0].gpus.first()
    make_booking(
        team, member, [gpu], start, start + timedelta(hours=6), status=ReservationStatus.COMPLETED
    )
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    return BillingPeriod.objects.get(month=NOV.date())
