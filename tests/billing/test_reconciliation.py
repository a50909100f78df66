"""A seeded month reconciles to the cent: every export format sums to the ledger, the ledger to
team totals + platform idle, and those to the fleet's GPU-hours x rates worked out here by hand.

November 2026 on the test fleet (16 H100 + 4 L40S): the H100 price changes mid-hour on the 15th,
one booking runs over quota, one is cancelled (its future holdings given back), one is released
early as idle, a node outage moves a booking to another GPU, and finance books a credit."""

import csv
import io
import json
from datetime import timedelta
from decimal import ROUND_HALF_EVEN, Decimal

import openpyxl
import pytest
from django.db.models import Sum
from openpyxl.utils import get_column_letter

from apps.billing.choices import ChargeSource
from apps.billing.metering import meter_interval
from apps.billing.models import BillingPeriod, LedgerEntry, RateCard
from apps.billing.services import adjustment_create
from apps.fleet.models import Gpu
from apps.reservations.models import ReservationGpu
from apps.telemetry.models import GpuHourRollup
from tests.billing.conftest import AFTER_NOV, DEC, NOV
from tests.billing.test_metering import book
from tests.conftest import client_for

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
CENT = Decimal("0.01")
RATE_CHANGE = NOV + timedelta(days=14, hours=12, minutes=20)


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


def h100_price(moment) -> Decimal:
    return Decimal("2.50") if moment < RATE_CHANGE else Decimal("3.60")


def exact_cost(start, end, price_at, multiplier=Decimal(1)) -> Decimal:
    """Seconds x price / 3600 over [start, end), split where the price changes."""
    total, cursor = Decimal(0), start
    while cursor < end:
        piece_end = min(end, RATE_CHANGE) if cursor < RATE_CHANGE else end
        seconds = Decimal(int((piece_end - cursor).total_seconds()))
        total += seconds * price_at(cursor) * multiplier / Decimal(3600)
        cursor = piece_end
    return total


@pytest.fixture
def month(team, other_team, member, outsider, finance_user, fleet, rates, h100, l40s):
    rates["h100"].effective_to = RATE_CHANGE
    rates["h100"].save()
    RateCard.objects.create(
        gpu_model=h100,
        price_per_gpu_hour=Decimal("3.60"),
        effective_from=RATE_CHANGE,
        over_quota_multiplier=Decimal("1.5"),
    )
    rates["l40s"].energy_price_per_kwh = Decimal("0.25")
    rates["l40s"].save()
    a = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index"))
    b = list(Gpu.objects.filter(node__hostname="h100-b").order_by("index"))
    l40 = list(Gpu.objects.filter(node__hostname="l40s-a").order_by("index"))
    premium = Decimal(0)  # what over-quota adds on top of list price

    # vision: 4 H100 for 3 days across the price change.
    start = NOV + timedelta(days=13, hours=9, minutes=45)
    book(team, member, a[:4], start, start + timedelta(days=3))
    # nlp: 2 H100 over quota for 5 h 10 min.
    oq_start = NOV + timedelta(days=20, hours=1, minutes=5)
    oq_end = oq_start + timedelta(hours=5, minutes=10)
    book(other_team, outsider, b[:2], oq_start, oq_end, over_quota=True)
    premium += 2 * exact_cost(oq_start, oq_end, h100_price, Decimal("0.5"))
    # vision: cancelled after 2 h of a 10 h booking (future holdings given back).
    c_start = NOV + timedelta(days=2, hours=8)
    cancelled = book(team, member, a[4:6], c_start, c_start + timedelta(hours=10))
    ReservationGpu.objects.filter(reservation=cancelled, gpu=a[5]).update(active=False)
    ReservationGpu.objects.filter(reservation=cancelled, gpu=a[4]).update(end=c_start + 2 * H)
    # nlp: an L40S booking released as idle after 3 of 8 hours; busy 1 h, 0.4 kWh per hour.
    r_start = NOV + timedelta(days=6, hours=4)
    released = book(other_team, outsider, l40[:1], r_start, r_start + 8 * H)
    ReservationGpu.objects.filter(reservation=released).update(end=r_start + 3 * H)
    for hour in range(3):
        GpuHourRollup.objects.create(
            gpu=l40[0],
            bucket=r_start + hour * H,
            samples=240,
            busy_seconds=3600 if hour == 0 else 0,
            energy_j=0.4 * 3_600_000,
        )
    energy = Decimal("1.2") * Decimal("0.25")
    # Node outage: nlp's booking on h100-b moves to h100-a at 17:30 on the 25th.
    o_start = NOV + timedelta(days=25, hours=12)
    outage = NOV + timedelta(days=25, hours=17, minutes=30)
    moved = book(other_team, outsider, b[2:3], o_start, o_start + 12 * H)
    ReservationGpu.objects.filter(reservation=moved).update(end=outage)
    ReservationGpu.objects.create(reservation=moved, gpu=a[7], start=outage, end=o_start + 12 * H)

    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    period = BillingPeriod.objects.get(month=NOV.date())
    adjustment_create(
        actor=finance_user,
        team=other_team,
        amount=Decimal("-7.77"),
        reason="Credit for the node outage on the 25th",
        period=period,
        now=AFTER_NOV,
    )
    fleet_cost = (
        16 * exact_cost(NOV, DEC, h100_price)
        + 4 * Decimal(720) * Decimal("0.90")
        + premium
        + energy
    )
    return {"period": period, "fleet_cost": fleet_cost, "adjustments": Decimal("-7.77")}


def ledger_total(period) -> Decimal:
    return LedgerEntry.objects.filter(period=period).aggregate(t=Sum("cost"))["t"]


def download(user, query: str):
    response = client_for(user).get(f"/api/v1/chargeback/?period=2026-11&{query}")
    assert response.status_code == 200
    if response.streaming:
        return b"".join(response.streaming_content)
    return b"".join(response)


def test_everything_reconciles_to_the_cent(month, finance_user, team, other_team):
    period = month["period"]
    usage = ledger_total(period) - month["adjustments"]
    assert cents(usage) == cents(month["fleet_cost"])  # ledger == fleet GPU-hours x rates

    summary = client_for(finance_user).get("/api/v1/usage/?period=2026-11").json()["teams"]
    by_team = {row["team"]: Decimal(row["cost"]) for row in summary}
    assert set(by_team) == {team.slug, other_team.slug, "platform"}
    ledger_cents = cents(ledger_total(period))
    assert sum(by_team.values()) == ledger_cents  # team totals + platform idle == ledger
    platform = LedgerEntry.objects.filter(period=period, source=ChargeSource.UNALLOCATED)
    assert by_team["platform"] == cents(platform.aggregate(t=Sum("cost"))["t"])

    for query in ("format=csv", "format=csv&level=detail"):
        rows = list(csv.DictReader(io.StringIO(download(finance_user, query).decode())))
        assert sum(Decimal(r["cost"]) for r in rows) == ledger_cents, query
        for slug, total in by_team.items():
            assert sum(Decimal(r["cost"]) for r in rows if r["team"] == slug) == total, query

    document = json.loads(download(finance_user, "format=json"))
    assert document["draft"] is True
    assert sum(Decimal(r["cost"]) for r in document["rows"]) == ledger_cents

    focus = list(csv.DictReader(io.StringIO(download(finance_user, "format=focus").decode())))
    assert sum(Decimal(r["BilledCost"]) for r in focus) == ledger_cents
    assert sum(Decimal(r["EffectiveCost"]) for r in focus) == ledger_cents
    adjustments = [r for r in focus if r["ChargeCategory"] == "Adjustment"]
    assert [Decimal(r["BilledCost"]) for r in adjustments] == [Decimal("-7.77")]
    usage_rows = [r for r in focus if r["ChargeCategory"] == "Usage"]
    assert {r["ConsumedUnit"] for r in usage_rows} == {"GPU-Hours"}
    fleet_hours = Decimal(20 * 720)
    assert sum(Decimal(r["ConsumedQuantity"]) for r in usage_rows) == fleet_hours
    assert {r["SubAccountId"] for r in focus} == {team.slug, other_team.slug, "platform"}
    over = [r for r in usage_rows if r["x_OverQuota"] == "true"]
    assert {r["x_ReservationId"] for r in over} and all(r["ResourceId"] for r in usage_rows)

    workbook = openpyxl.load_workbook(io.BytesIO(download(finance_user, "format=xlsx")))
    detail = list(workbook["Detail"].iter_rows(values_only=True))
    cost_column = detail[0].index("cost")
    assert detail[-1][0] == "Total"  # the totals row holds SUM formulas
    letter = get_column_letter(cost_column + 1)
    assert detail[-1][cost_column] == f"=SUM({letter}2:{letter}{len(detail) - 1})"
    xlsx_total = sum(Decimal(str(row[cost_column])) for row in detail[1:-1])
    assert xlsx_total == ledger_cents
    summary_rows = list(workbook["Summary"].iter_rows(values_only=True))
    assert summary_rows[0] == ("team", "invoice_id", "gpu_hours", "cost", "check_from_detail")
    assert summary_rows[-1][3] == f"=SUM(D2:D{len(summary_rows) - 1})"
    assert str(summary_rows[1][4]).startswith("=SUMIF(Detail!")
    assert sum(Decimal(str(r[3])) for r in summary_rows[1:-1]) == ledger_cents
    assert {r[1] for r in summary_rows[1:-1]} == {
        f"DRAFT-GPU-2026-11-{slug}" for slug in (team.slug, other_team.slug, "platform")
    }


def test_filtered_team_export_rounds_exactly_as_in_the_full_export(month, finance_user, other_team):
    full = csv.DictReader(io.StringIO(download(finance_user, "format=csv").decode()))
    expected = [r for r in full if r["team"] == other_team.slug]
    only = list(
        csv.DictReader(
            io.StringIO(download(finance_user, f"format=csv&team={other_team.slug}").decode())
        )
    )
    assert only == expected


def test_rerunning_metering_changes_nothing(month):
    period = month["period"]
    before = (LedgerEntry.objects.count(), ledger_total(period))
    result = meter_interval(start=NOV + timedelta(days=3, hours=5), end=DEC, now=AFTER_NOV)
    assert result.inserted == 0
    assert (LedgerEntry.objects.count(), ledger_total(period)) == before


def test_cancelled_and_released_time_is_not_charged(month, team, other_team):
    reservation_rows = LedgerEntry.objects.filter(source=ChargeSource.RESERVATION)
    assert not reservation_rows.filter(gpu__node__hostname="h100-a", gpu__index=5).exists()
    l40_hours = reservation_rows.filter(gpu__model__name="L40S-48GB").aggregate(
        s=Sum("gpu_seconds")
    )["s"]
    assert l40_hours == 3 * 3600
