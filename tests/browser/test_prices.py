"""Prices a person sees before they book: the booking form shows list price, the over-quota
premium of the GPUs above the team's guarantee and the energy estimate."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.billing.models import RateCard
from apps.fleet.models import GpuModel
from tests.browser.conftest import login

pytestmark = pytest.mark.browser

H100 = "H100-SXM-80GB"


def test_booking_form_shows_the_price_with_the_over_quota_premium(page, browser_errors):
    browser_errors.allow(r"status of 400 .*booking-price")  # the refused count of 0, below
    # The demo's vision may hold 8 H100, 4 of them guaranteed.
    RateCard.objects.create(
        gpu_model=GpuModel.objects.get(name=H100),
        price_per_gpu_hour=Decimal("2.79"),
        over_quota_multiplier=Decimal("1.5"),
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
    )
    login(page, "alice")
    page.goto("/reservations/new/")
    page.get_by_label("Team").select_option("vision")
    page.get_by_label("GPU model").select_option(H100)
    start = timezone.localtime().replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
    page.get_by_label("Start").fill(start.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("Duration (hours)").fill("140")
    page.get_by_label("GPUs", exact=True).fill("2")

    price = page.get_by_test_id("booking-price")
    expect(price.locator("[data-price=total]")).to_have_text("781.20")  # 2 x 140 h x 2.79
    expect(price).to_contain_text("all GPUs within the guarantee")

    page.get_by_label("GPUs", exact=True).fill("8")
    expect(price.locator("[data-price=list_cost]")).to_have_text("3124.80")
    expect(price.locator("[data-price=over_quota_premium]")).to_have_text("781.20")
    expect(price.locator("[data-price=energy_cost]")).to_have_text("0.00")
    expect(price.locator("[data-price=total]")).to_have_text("3906.00")
    expect(price).to_contain_text("4 of 8 GPUs above the guarantee")

    page.get_by_label("GPUs", exact=True).fill("0")
    expect(page.get_by_test_id("booking-price-error")).to_contain_text("No price")
    expect(price).to_be_hidden()


def test_budgets_page_shows_left_and_the_forecast(login_as):
    """vision was charged 100 a day for the last 7 days: the page shows its run-rate forecast,
    the day it passes its budget, and a "left" that is budget - spent to the cent."""
    from apps.billing.choices import ChargeSource
    from apps.billing.forecast import forecast
    from apps.billing.models import BillingPeriod, Budget, LedgerEntry
    from apps.billing.periods import month_start
    from apps.teams.models import Team

    vision = Team.objects.get(slug="vision")
    now = timezone.now()
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    for days_ago in range(1, 8):
        moment = today - timedelta(days=days_ago, hours=-3)
        period = BillingPeriod.objects.get_or_create(month=month_start(moment))[0]
        LedgerEntry.objects.create(
            period=period, team=vision, source=ChargeSource.JOB, source_id=days_ago,
            slice_start=moment, slice_end=moment + timedelta(hours=1), gpu_seconds=3600,
            gpu_cost=Decimal("100.004"), cost=Decimal("100.004"),
        )  # fmt: skip
    this_month = BillingPeriod.objects.get_or_create(month=month_start(now))[0]
    budget = Budget.objects.create(team=vision, period=this_month, amount=Decimal("4000.00"))
    # A budget the run-rate passes in two days (or at the month's end, whichever is first).
    budget.amount = forecast(team=vision, period=this_month, now=now).spent + Decimal(150)
    budget.save()
    outlook = forecast(team=vision, period=this_month, now=now)

    page = login_as("fran")
    page.goto(f"/billing/budgets/?period={now:%Y-%m}")
    row = page.locator('[data-testid=budgets] tr[data-team="vision"]')
    spent = Decimal(row.locator("[data-col=spent]").inner_text().split()[0].replace(",", ""))
    left = Decimal(row.locator("[data-col=left]").inner_text().split()[0].replace(",", ""))
    assert spent == outlook.spent and left == budget.amount - spent
    after = row.locator("[data-col=left-after-bookings]").inner_text().split()[0]
    assert Decimal(after.replace(",", "")) == left  # nothing booked ahead
    # The forecast moves with the clock (the rest of today at the run-rate): within a cent.
    shown = row.locator("[data-col=forecast]").inner_text().split()[0].replace(",", "")
    assert abs(Decimal(shown) - outlook.projected) <= Decimal("0.05")
    expect(row.get_by_test_id("forecast-message")).to_have_text(outlook.message)
    assert outlook.run_rate == Decimal("100.00")
    assert outlook.message.startswith("At this rate vision ")


def test_finance_shares_the_platform_cost_by_usage_on_the_chargeback_page(login_as):
    from apps.billing.choices import ChargeSource
    from apps.billing.models import BillingPeriod, LedgerEntry
    from apps.billing.periods import add_months, month_start
    from apps.teams.models import Team

    month = add_months(month_start(timezone.now()), -1)
    period = BillingPeriod.objects.create(month=month)
    moment = datetime(month.year, month.month, 2, 10, tzinfo=UTC)
    for team, seconds, cost in (
        ("vision", 3600, "30.00"),
        ("nlp", 1200, "10.00"),
        (None, 7200, "100.00"),
    ):
        LedgerEntry.objects.create(
            period=period, team=Team.objects.get(slug=team) if team else None,
            source=ChargeSource.JOB if team else ChargeSource.UNALLOCATED, source_id=0,
            slice_start=moment, slice_end=moment + timedelta(hours=2), gpu_seconds=seconds,
            gpu_cost=Decimal(cost), cost=Decimal(cost),
        )  # fmt: skip
    page = login_as("fran")
    page.goto(f"/billing/?period={month:%Y-%m}")
    page.get_by_label("Recover the platform's cost").select_option("usage")
    page.get_by_role("button", name="Save policy").click()
    summary = page.get_by_test_id("chargeback-summary")
    share = "[data-testid=platform-share]"
    expect(summary.locator(f'tr[data-team="vision"] {share}')).to_have_text("75.00")
    expect(summary.locator(f'tr[data-team="nlp"] {share}')).to_have_text("25.00")
    expect(summary.locator(f'tr[data-team="platform"] {share}')).to_have_text("-100.00")
    expect(summary.get_by_test_id("grand-total-after-recovery")).to_have_text("140.00")
    expect(page.get_by_test_id("recovery-summary")).to_contain_text("0.00 USD kept on the platform")
