"""Prices, forecasts and cost recovery on SQLite (the demo's database), run as a script by the
test suite: `python -m tests.billing.sqlite_money` with DATABASE_URL pointing at a fresh file.

The same cases as the PostgreSQL tests (test_pricing, test_forecast, test_recovery): the
walkthrough booking priced with its over-quota premium and refused by a block budget, metering
charging a booking what it was priced at across a rate change, the forecast's day, and each
recovery policy's split. Prints one JSON line."""

import json
import os


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from datetime import UTC, date, datetime, timedelta
    from decimal import Decimal

    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Sum
    from django.utils import timezone

    from apps.billing.choices import ChargeSource, Enforcement, RecoveryMethod
    from apps.billing.exports import team_totals
    from apps.billing.forecast import forecast
    from apps.billing.metering import meter_interval
    from apps.billing.models import BillingPeriod, Budget, LedgerEntry, RateCard
    from apps.billing.periods import month_bounds, month_start
    from apps.billing.pricing import quote_booking
    from apps.billing.recovery import recovery
    from apps.billing.services import budget_set, cost_recovery_set
    from apps.reservations.services import reservation_create
    from apps.teams.models import Quota
    from portal.exceptions import PolicyRefusal
    from tests.factories import (
        FinanceUserFactory,
        MembershipFactory,
        TeamFactory,
        UserFactory,
        make_node_with_gpus,
    )

    call_command("migrate", verbosity=0)
    nodes = [make_node_with_gpus("h100-a", 8), make_node_with_gpus("h100-b", 8)]
    h100 = nodes[0].gpus.first().model
    vision, nlp = TeamFactory(slug="vision"), TeamFactory(slug="nlp")
    alice = MembershipFactory(team=vision, user=UserFactory(username="alice")).user
    bob = MembershipFactory(team=nlp, user=UserFactory(username="bob")).user
    fran = FinanceUserFactory(username="fran")
    Quota.objects.create(team=vision, gpu_model=h100, guaranteed=4, limit=8)
    Quota.objects.create(team=nlp, gpu_model=h100, guaranteed=8, limit=16)
    card = RateCard.objects.create(
        gpu_model=h100, price_per_gpu_hour=Decimal("2.79"), over_quota_multiplier=Decimal("1.5"),
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    out = {"vendor": connection.vendor}

    start = (timezone.now() + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    if month_start(start + timedelta(hours=140)) != month_start(start):
        start = month_bounds(month_start(start))[1] + timedelta(hours=9)
    price = quote_booking(
        team=vision, gpu_model=h100, count=8, start=start, end=start + timedelta(hours=140)
    )
    out["walkthrough"] = price.as_dict()
    period = BillingPeriod.objects.get_or_create(month=month_start(start))[0]
    budget_set(actor=fran, team=vision, period=period, amount=Decimal("3500"),
               enforcement=Enforcement.BLOCK)  # fmt: skip
    try:
        reservation_create(team=vision, user=alice, gpu_model=h100, count=8, start=start,
                           end=start + timedelta(hours=140))  # fmt: skip
        out["refusal"] = None
    except PolicyRefusal as refusal:
        out["refusal"] = refusal.message
    Budget.objects.filter(team=vision).delete()

    end = start + timedelta(hours=10)
    card.effective_to = start + timedelta(hours=4, minutes=30)
    card.save()
    RateCard.objects.create(
        gpu_model=h100, price_per_gpu_hour=Decimal("3.10"), over_quota_multiplier=Decimal("2"),
        effective_from=card.effective_to,
    )  # fmt: skip
    quoted = quote_booking(team=vision, gpu_model=h100, count=8, start=start, end=end)
    booking = reservation_create(team=vision, user=alice, gpu_model=h100, count=8, start=start,
                                 end=end)  # fmt: skip
    meter_interval(start=start, end=end, now=end + timedelta(hours=1))
    charged = LedgerEntry.objects.filter(
        source=ChargeSource.RESERVATION, source_id=booking.pk
    ).aggregate(total=Sum("cost"))["total"]
    out["metered"] = {
        "quoted": str(quoted.total),
        "charged": str(charged.quantize(Decimal("0.01"))),
    }

    december = BillingPeriod.objects.get_or_create(month=date(2026, 12, 1))[0]
    first = datetime(2026, 12, 1, tzinfo=UTC)
    for index in range(9):
        moment = first + timedelta(days=index, hours=3)
        LedgerEntry.objects.create(
            period=december, team=nlp, source=ChargeSource.JOB, source_id=10_000 + index,
            slice_start=moment, slice_end=moment + timedelta(hours=1), gpu_seconds=3600,
            gpu_cost=Decimal(100), cost=Decimal(100),
        )  # fmt: skip
    Budget.objects.create(team=nlp, period=december, amount=Decimal("2000"))
    outlook = forecast(team=nlp, period=december, now=datetime(2026, 12, 10, tzinfo=UTC))
    out["forecast"] = outlook.as_dict()

    splits = {}
    for method in RecoveryMethod.values:
        cost_recovery_set(actor=fran, period=period, method=method)
        split = recovery(period)
        splits[method] = {
            "platform_cost": str(split.platform_cost),
            "recovered": str(split.recovered),
            "kept": str(split.kept),
            "fleet_total": str(sum(row["cost"] for row in team_totals(period))),
            "teams_after": str(
                sum(r["cost"] for r in team_totals(period) if r["team_id"]) + split.recovered
            ),
        }
    out["recovery"] = splits
    del bob
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
