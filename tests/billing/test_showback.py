"""Showback mode: GPU-hours only, no money anywhere, no budget refusals."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest

from apps.billing.choices import Enforcement
from apps.billing.metering import meter_interval
from apps.billing.models import BillingPeriod
from apps.billing.periods import month_start
from apps.billing.services import budget_set
from tests.billing.conftest import AFTER_NOV, DEC, NOV
from tests.billing.test_metering import book
from tests.conftest import client_for
from tests.reservations.conftest import booking

pytestmark = pytest.mark.django_db


@pytest.fixture
def showback(settings):
    settings.BILLING_MODE = "showback"


def test_exports_carry_hours_not_money(showback, finance_user, team, member, fleet, rates):
    book(
        team,
        member,
        [fleet[0].gpus.first()],
        NOV + timedelta(days=1),
        NOV + timedelta(days=1, hours=3),
    )
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    client = client_for(finance_user)
    response = client.get("/api/v1/chargeback/?period=2026-11&format=csv")
    text = b"".join(response.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert "cost" not in rows[0] and "currency" not in rows[0]
    mine = [r for r in rows if r["team"] == team.slug]
    assert sum(Decimal(r["gpu_hours"]) for r in mine) == Decimal(3)
    focus = client.get("/api/v1/chargeback/?period=2026-11&format=focus")
    assert focus.status_code == 400 and focus.json()["code"] == "showback_mode"
    usage = client.get("/api/v1/usage/?period=2026-11").json()
    assert usage["mode"] == "showback" and "cost" not in usage["teams"][0]


def test_budgets_do_not_block_in_showback(
    showback, member, quotas, finance_user, team, rates, tomorrow_9
):
    period = BillingPeriod.objects.get_or_create(month=month_start(tomorrow_9))[0]
    budget_set(actor=finance_user, team=team, period=period, amount=Decimal(0),
               enforcement=Enforcement.BLOCK)  # fmt: skip
    response = client_for(member).post(
        "/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json"
    )
    assert response.status_code == 201
