"""Demo data for billing: prices, past bookings, then (once the demo's telemetry exists, so
busy hours and energy are charged as measured) the metering and this month's budgets.

Part of `seed_demo`, in that order; does nothing on a database that already has a
ledger.
"""

import random
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from apps.billing.choices import Enforcement
from apps.billing.metering import meter_interval
from apps.billing.models import Budget, LedgerEntry, RateCard
from apps.billing.periods import month_start
from apps.billing.services import budget_alerts_check, period_get_or_create
from apps.dashboards.demo.fleet import HISTORY_DAYS
from apps.fleet.models import Gpu, GpuModel
from apps.reservations.choices import ReservationStatus
from apps.reservations.models import Reservation, ReservationGpu
from apps.teams.models import Membership, Team

PRICES = {  # per GPU-hour, roughly what clouds charge for on-demand capacity
    "H100-SXM-80GB": Decimal("2.49"),
    "A100-SXM4-80GB": Decimal("1.69"),
    "L40S-48GB": Decimal("0.89"),
}
BUDGETS = {
    "vision": ("4000", Enforcement.BLOCK),
    "nlp": ("12000", Enforcement.ALERT),
    "speech": ("2500", Enforcement.ALERT),
    "robotics": ("1500", Enforcement.BLOCK),
}


def seed_billing_demo(*, now=None, days: int = HISTORY_DAYS) -> None:
    """Prices and `days` of past bookings, metered at once (for a database without telemetry;
    `seed_demo` calls the two steps with the telemetry written in between)."""
    now = now or timezone.now()
    start = (now - timedelta(days=days)).replace(minute=0, second=0, microsecond=0)
    seed_billing_history(start=start, now=now)
    meter_billing_demo(start=start, now=now)


def seed_billing_history(*, start, now=None) -> None:
    """Rate cards and completed bookings from `start` (the demo fleet's first hour) to now."""
    if LedgerEntry.objects.exists():
        return
    now = now or timezone.now()
    for name, price in PRICES.items():
        model = GpuModel.objects.filter(name=name).first()
        if model and not RateCard.objects.filter(gpu_model=model).exists():
            RateCard.objects.create(
                gpu_model=model,
                price_per_gpu_hour=price,
                effective_from=start - timedelta(days=60),
                over_quota_multiplier=Decimal("1.25"),
                energy_price_per_kwh=Decimal("0.21"),
            )
    _past_bookings(start, now - timedelta(hours=2))


def meter_billing_demo(*, start, now=None) -> None:
    """Charge the demo's history (after its telemetry is written) and set this month's
    budgets."""
    if LedgerEntry.objects.exists():
        return
    now = now or timezone.now()
    meter_interval(start=start, end=now)
    period = period_get_or_create(month_start(now))
    for slug, (amount, enforcement) in BUDGETS.items():
        team = Team.objects.filter(slug=slug).first()
        if team:
            budget, _ = Budget.objects.update_or_create(
                team=team,
                period=period,
                defaults={"amount": Decimal(amount), "enforcement": enforcement},
            )
            budget_alerts_check(budget=budget)


def _past_bookings(start, end) -> None:
    """Completed bookings over [start, end), one GPU after the other, never overlapping."""
    rng = random.Random(11)
    teams = list(Team.objects.order_by("slug"))
    if not teams or Reservation.objects.filter(end__lte=end).exists():
        return
    for gpu in Gpu.objects.filter(mig_parent__isnull=True).select_related("model"):
        cursor = start + timedelta(hours=rng.randrange(0, 24))
        while True:
            length = timedelta(hours=rng.randrange(2, 30))
            if cursor + length > end:
                break
            team = rng.choice(teams)
            member = Membership.objects.filter(team=team).select_related("user").first()
            if member:
                reservation = Reservation.objects.create(
                    team=team,
                    created_by=member.user,
                    gpu_model=gpu.model,
                    count=1,
                    start=cursor,
                    end=cursor + length,
                    status=ReservationStatus.COMPLETED,
                    over_quota=rng.random() < 0.2,
                    purpose="demo history",
                )
                ReservationGpu.objects.create(
                    reservation=reservation,
                    gpu=gpu,
                    start=cursor,
                    end=cursor + length,
                    over_quota=reservation.over_quota,
                )
            cursor += length + timedelta(hours=rng.randrange(1, 20))
