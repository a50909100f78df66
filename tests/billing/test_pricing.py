"""One price function: the price before booking (API), budget admission, job estimates and
metering all price GPU time the same way, over-quota multiplier and rate-card changes included."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone

from apps.billing.choices import ChargeSource, Enforcement
from apps.billing.metering import meter_interval
from apps.billing.models import BillingPeriod, LedgerEntry, RateCard
from apps.billing.periods import month_bounds, month_start
from apps.billing.pricing import price_holding, quote_booking
from apps.billing.services import budget_set
from apps.efficiency.selectors import estimated_costs
from apps.jobs.models import Job
from apps.reservations.models import ReservationGpu
from apps.reservations.services import reservation_create
from apps.teams.models import Quota
from portal.exceptions import PolicyRefusal
from tests.conftest import client_for
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

HOURS = 140


@pytest.fixture
def walkthrough(team, h100, fleet):
    """vision may hold 8 H100, 4 of them guaranteed; H100 at 2.79/GPU-h, x1.5 over quota."""
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=8)
    return RateCard.objects.create(
        gpu_model=h100,
        price_per_gpu_hour=Decimal("2.79"),
        over_quota_multiplier=Decimal("1.5"),
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
    )


@pytest.fixture
def start_in_one_month():
    """A start from which 140 hours stay inside one calendar month."""
    start = (timezone.now() + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    if month_start(start + timedelta(hours=HOURS)) != month_start(start):
        start = month_bounds(month_start(start))[1] + timedelta(hours=9)
    return start


def test_eight_gpus_over_a_guarantee_of_four_are_priced_with_the_premium(
    team, member, h100, walkthrough, start_in_one_month
):
    end = start_in_one_month + timedelta(hours=HOURS)
    price = quote_booking(team=team, gpu_model=h100, count=8, start=start_in_one_month, end=end)
    assert price.over_quota_gpus == 4
    assert price.list_cost == Decimal("3124.80")  # 8 x 140 h x 2.79
    assert price.over_quota_premium == Decimal("781.20")  # 4 x 140 h x 2.79 x 0.5
    assert price.total == Decimal("3906.00")

    response = client_for(member).get(
        "/api/v1/booking-price/",
        {"team": "vision", "gpu_model": h100.name, "count": 8,
         "start": start_in_one_month.isoformat(), "duration_hours": HOURS},
    )  # fmt: skip
    body = response.json()
    assert response.status_code == 200, body
    assert (body["list_cost"], body["over_quota_premium"], body["total"]) == (
        "3124.80", "781.20", "3906.00"
    )  # fmt: skip
    assert body["over_quota_gpus"] == 4 and body["energy_cost"] == "0.00"


def test_booking_price_api_refuses_bad_input_and_other_teams(member, other_team, h100, walkthrough):
    client = client_for(member)
    start = (timezone.now() + timedelta(days=1)).isoformat()
    missing_end = client.get(
        "/api/v1/booking-price/", {"team": "vision", "gpu_model": h100.name, "count": 2,
                                   "start": start}
    )  # fmt: skip
    assert missing_end.status_code == 400 and "end" in missing_end.json()["detail"]
    bad_count = client.get(
        "/api/v1/booking-price/", {"team": "vision", "gpu_model": h100.name, "count": 0,
                                   "start": start, "duration_hours": 2}
    )  # fmt: skip
    assert bad_count.status_code == 400 and "count" in bad_count.json()["detail"]
    other = client.get(
        "/api/v1/booking-price/", {"team": "nlp", "gpu_model": h100.name, "count": 1,
                                   "start": start, "duration_hours": 2}
    )  # fmt: skip
    assert other.status_code == 404


def test_block_mode_budget_refuses_the_walkthrough_booking_at_its_real_price(
    team, member, finance_user, h100, walkthrough, start_in_one_month
):
    period = BillingPeriod.objects.get_or_create(month=month_start(start_in_one_month))[0]
    # Enough for the list price (3,124.80), not for what it will be charged (3,906.00).
    budget_set(
        actor=finance_user, team=team, period=period, amount=Decimal("3500"),
        enforcement=Enforcement.BLOCK,
    )  # fmt: skip
    with pytest.raises(PolicyRefusal) as refused:
        reservation_create(
            team=team, user=member, gpu_model=h100, count=8, start=start_in_one_month,
            end=start_in_one_month + timedelta(hours=HOURS),
        )  # fmt: skip
    assert "would cost 3,906.00 USD" in str(refused.value.message)
    assert refused.value.detail["over_quota_premium"] == "781.20"
    assert not ReservationGpu.objects.exists()


def test_job_estimate_cuts_where_a_rate_card_starts_before_the_job_would_end(
    team, member, h100, fleet
):
    now = timezone.now().replace(microsecond=0)
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=8)
    change = now + timedelta(hours=1)
    RateCard.objects.create(
        gpu_model=h100, price_per_gpu_hour=Decimal("2.50"),
        effective_from=now - timedelta(days=1), effective_to=change,
    )  # fmt: skip
    RateCard.objects.create(
        gpu_model=h100, price_per_gpu_hour=Decimal("5.00"), effective_from=change
    )
    job = JobFactory(team=team, submitted_by=member, gpu_model=h100, gpu_count=2,
                     max_runtime_seconds=4 * 3600)  # fmt: skip
    job = Job.objects.select_related("gpu_model").get(pk=job.pk)
    figures = estimated_costs([job], now=now)[job.pk]
    assert figures["estimated_cost"] == "35.00"  # 2 GPUs x (1 h x 2.50 + 3 h x 5.00)


def test_metering_charges_a_fully_used_booking_what_it_was_priced_at(
    team, member, h100, walkthrough, start_in_one_month
):
    start = start_in_one_month
    end = start + timedelta(hours=10)
    # A new price starts in the middle of the booking; both sides carry the premium.
    walkthrough.effective_to = start + timedelta(hours=4, minutes=30)
    walkthrough.save()
    RateCard.objects.create(
        gpu_model=h100, price_per_gpu_hour=Decimal("3.10"), over_quota_multiplier=Decimal("2"),
        effective_from=walkthrough.effective_to,
    )  # fmt: skip
    quoted = quote_booking(team=team, gpu_model=h100, count=8, start=start, end=end)
    reservation = reservation_create(
        team=team, user=member, gpu_model=h100, count=8, start=start, end=end
    )
    assert reservation.holdings.filter(over_quota=True).count() == 4

    meter_interval(start=start, end=end, now=end + timedelta(hours=1))
    charged = LedgerEntry.objects.filter(
        source=ChargeSource.RESERVATION, source_id=reservation.pk
    ).aggregate(total=Sum("cost"))["total"]
    # 8 x (4.5 x 2.79 + 5.5 x 3.10) + 4 x (4.5 x 2.79 x 0.5 + 5.5 x 3.10 x 1)
    assert quoted.total == Decimal("330.15")
    assert charged.quantize(Decimal("0.01")) == quoted.total
    again = price_holding(gpu_model=h100, count=8, start=start, end=end, over_quota_gpus=4)
    assert again.total == quoted.total
