"""Budgets: alerts at 50/80/100 % (once each, by email and in the API), and `block` mode making
the booking budget check refuse what the team cannot pay for."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from apps.billing.choices import Enforcement
from apps.billing.models import BillingPeriod, Budget, BudgetAlert, LedgerEntry
from apps.billing.periods import month_start
from apps.billing.services import adjustment_create, budget_alerts_check, budget_set
from apps.reservations.models import Reservation
from tests.conftest import client_for
from tests.reservations.conftest import booking

pytestmark = pytest.mark.django_db


@pytest.fixture
def this_month():
    return BillingPeriod.objects.create(month=month_start(timezone.now()))


def charge(team, period, amount: str, finance_user):
    adjustment_create(
        actor=finance_user, team=team, amount=Decimal(amount), reason="test charge", period=period
    )


def test_thresholds_alert_once_each(
    team, team_admin, finance_user, this_month, django_capture_on_commit_callbacks
):
    budget = budget_set(actor=finance_user, team=team, period=this_month, amount=Decimal("100"))
    charge(team, this_month, "55", finance_user)
    with django_capture_on_commit_callbacks(execute=True):
        assert [a.threshold for a in budget_alerts_check(budget=budget)] == [50]
    assert len(mail.outbox) == 1 and "50 %" in mail.outbox[0].subject
    assert mail.outbox[0].to == [team_admin.email]
    with django_capture_on_commit_callbacks(execute=True):
        assert budget_alerts_check(budget=budget) == []  # nothing new, no second mail
    charge(team, this_month, "50", finance_user)
    with django_capture_on_commit_callbacks(execute=True):
        assert sorted(a.threshold for a in budget_alerts_check(budget=budget)) == [80, 100]
    assert len(mail.outbox) == 2 and "100 %" in mail.outbox[1].subject
    alerts = client_for(team_admin).get("/api/v1/budgets/").json()["results"][0]["alerts"]
    assert sorted(a["threshold"] for a in alerts) == [50, 80, 100]


def test_block_mode_refuses_a_booking_over_what_is_left(
    member, quotas, finance_user, team, rates, tomorrow_9
):
    period = BillingPeriod.objects.get_or_create(month=month_start(tomorrow_9))[0]
    budget_set(
        actor=finance_user, team=team, period=period, amount=Decimal("30"),
        enforcement=Enforcement.BLOCK,
    )  # fmt: skip
    client = client_for(member)
    # 2 GPUs x 2 h x 2.50 = 10.00: fits.
    ok = client.post("/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json")
    assert ok.status_code == 201, ok.json()
    # 2 GPUs x 5 h x 2.50 = 25.00 but only 20.00 is left.
    later = tomorrow_9 + timedelta(hours=3)
    refused = client.post(
        "/api/v1/reservations/", booking(count=2, start=later, hours=5), format="json"
    )
    assert refused.status_code == 403
    body = refused.json()
    assert body["code"] == "budget_exhausted"
    assert body["detail"]["booking_cost"] == "25.00"
    assert body["detail"]["booked"] == "10.00" and body["detail"]["left"] == "20.00"
    assert Reservation.objects.count() == 1  # nothing half-written


def test_alert_mode_only_warns(member, quotas, finance_user, team, rates, tomorrow_9):
    period = BillingPeriod.objects.get_or_create(month=month_start(tomorrow_9))[0]
    budget_set(actor=finance_user, team=team, period=period, amount=Decimal("1"))
    response = client_for(member).post(
        "/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json"
    )
    assert response.status_code == 201


def test_budgets_of_a_closed_period_cannot_change(team, finance_user):
    period = BillingPeriod.objects.create(month=month_start(timezone.now()) - timedelta(days=40))
    period = BillingPeriod.objects.get(pk=period.pk)
    BillingPeriod.objects.filter(pk=period.pk).update(status="closed")
    period.refresh_from_db()
    from portal.exceptions import ConflictError

    with pytest.raises(ConflictError):
        budget_set(actor=finance_user, team=team, period=period, amount=Decimal("5"))
    with pytest.raises(ConflictError):
        adjustment_create(
            actor=finance_user, team=team, amount=Decimal("1"), reason="x", period=period
        )
    assert not Budget.objects.exists() and not BudgetAlert.objects.exists()


def test_database_refuses_writes_to_a_closed_period(team):
    """Even a write that bypasses the services cannot touch a closed month (PostgreSQL)."""
    assert connection.vendor == "postgresql"
    period = BillingPeriod.objects.create(month=month_start(timezone.now()) - timedelta(days=40))
    entry = LedgerEntry.objects.create(
        period=period, team=team, source="adjustment", source_id=1, cost=Decimal("3"),
        slice_start=timezone.now(), slice_end=timezone.now(),
    )  # fmt: skip
    BillingPeriod.objects.filter(pk=period.pk).update(status="closed")
    for write in (
        lambda: LedgerEntry.objects.filter(pk=entry.pk).update(cost=Decimal("0")),
        lambda: LedgerEntry.objects.filter(pk=entry.pk).delete(),
        lambda: BillingPeriod.objects.filter(pk=period.pk).update(status="open"),
        lambda: LedgerEntry.objects.create(
            period=period, team=team, source="adjustment", source_id=2, cost=Decimal("1"),
            slice_start=timezone.now(), slice_end=timezone.now(),
        ),
    ):  # fmt: skip
        with pytest.raises(IntegrityError), transaction.atomic():
            write()
    entry.refresh_from_db()
    assert entry.cost == Decimal("3")
