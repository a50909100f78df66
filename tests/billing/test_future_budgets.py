"""Budgets for months ahead: finance sets them (API and page), and a `block` budget refuses the
part of a booking that falls in its month, whichever month the booking starts in."""

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from apps.billing.models import BillingPeriod, Budget
from apps.billing.periods import add_months, month_bounds, month_start
from apps.billing.selectors import burn_down
from apps.reservations.models import Reservation
from tests.conftest import client_for
from tests.reservations.conftest import booking

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quotas", "rates")]
# The first day of next month may be up to 31 days away, past the default 30 days of advance.
BOOK_AHEAD = override_settings(RESERVATION_MAX_ADVANCE_DAYS=62)


def _month(offset: int):
    return add_months(month_start(timezone.now()), offset)


def _first_day_9(offset: int) -> datetime:
    month = _month(offset)
    return datetime(month.year, month.month, 1, 9, tzinfo=UTC)


def _soon_this_month(hours: int = 2) -> datetime:
    """A slot-aligned start this month whose booking also ends this month."""
    now = timezone.now()
    start = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
    if start + timedelta(hours=hours) > month_bounds(month_start(now))[1]:
        pytest.skip("too close to the end of the month for a booking inside it")
    return start


def _set_budget(client, team, month, amount, enforcement="block"):
    body = {"team": team.slug, "period": f"{month:%Y-%m}", "amount": amount}
    return client.post("/api/v1/budgets/", body | {"enforcement": enforcement}, format="json")


@BOOK_AHEAD
def test_a_zero_block_budget_for_next_month_stops_bookings_then_not_this_months(
    member, finance_user, team
):
    response = _set_budget(client_for(finance_user), team, _month(1), "0")
    assert response.status_code == 201, response.json()
    assert response.json()["period"] == f"{_month(1):%Y-%m}"

    client = client_for(member)
    refused = client.post(
        "/api/v1/reservations/", booking(count=2, start=_first_day_9(1)), format="json"
    )
    assert refused.status_code == 403, refused.json()
    body = refused.json()
    assert body["code"] == "budget_exhausted"
    assert body["detail"]["period"] == f"{_month(1):%Y-%m}"
    assert body["detail"]["booking_cost"] == "10.00" and body["detail"]["left"] == "0.00"
    assert not Reservation.objects.exists()  # nothing half-written

    ok = client.post(
        "/api/v1/reservations/", booking(count=2, start=_soon_this_month()), format="json"
    )
    assert ok.status_code == 201, ok.json()


@BOOK_AHEAD
def test_a_booking_across_the_month_end_is_weighed_against_each_months_budget(
    member, finance_user, team
):
    month_end = month_bounds(_month(0))[1]
    if month_end - timedelta(hours=2) < timezone.now():
        pytest.skip("the month ends too soon to book across its end")
    _set_budget(client_for(finance_user), team, _month(1), "0")
    client = client_for(member)
    across = booking(count=2, start=month_end - timedelta(hours=1), hours=2)
    refused = client.post("/api/v1/reservations/", across, format="json")
    assert refused.status_code == 403, refused.json()
    # Only the hour in the next month is weighed against its budget: 2 GPUs x 1 h x 2.50.
    assert refused.json()["detail"]["booking_cost"] == "5.00"
    assert refused.json()["detail"]["period"] == f"{_month(1):%Y-%m}"
    assert not Reservation.objects.exists()


@BOOK_AHEAD
def test_this_months_bookings_do_not_use_up_next_months_budget(member, finance_user, team):
    assert _set_budget(client_for(finance_user), team, _month(1), "10.00").status_code == 201
    client = client_for(member)
    now_ok = client.post(
        "/api/v1/reservations/", booking(count=2, start=_soon_this_month()), format="json"
    )
    assert now_ok.status_code == 201, now_ok.json()
    period = BillingPeriod.objects.get(month=_month(1))
    assert burn_down(team=team, period=period, now=timezone.now())["booked"] == 0
    # 2 GPUs x 2 h x 2.50 = 10.00: exactly next month's budget.
    next_ok = client.post(
        "/api/v1/reservations/", booking(count=2, start=_first_day_9(1)), format="json"
    )
    assert next_ok.status_code == 201, next_ok.json()
    again = client.post(
        "/api/v1/reservations/",
        booking(count=2, start=_first_day_9(1) + timedelta(hours=3)),
        format="json",
    )
    assert again.status_code == 403 and again.json()["detail"]["booked"] == "10.00"


def test_budget_months_too_far_ahead_closed_or_malformed_are_refused_clearly(finance_user, team):
    client = client_for(finance_user)
    assert _set_budget(client, team, _month(12), "100").status_code == 201
    too_far = _set_budget(client, team, _month(13), "100")
    assert too_far.status_code == 400
    assert too_far.json()["code"] == "future_period"
    assert f"until {_month(12):%Y-%m}" in too_far.json()["message"]
    assert not BillingPeriod.objects.filter(month=_month(13)).exists()

    closed = BillingPeriod.objects.create(month=_month(-2))
    BillingPeriod.objects.filter(pk=closed.pk).update(status="closed")
    refused = _set_budget(client, team, _month(-2), "100")
    assert refused.status_code == 409 and refused.json()["code"] == "period_closed"

    body = {"team": team.slug, "period": "2027-13", "amount": "1", "enforcement": "block"}
    assert client.post("/api/v1/budgets/", body, format="json").status_code == 400
    assert list(Budget.objects.values_list("period__month", flat=True)) == [_month(12)]


def test_the_budget_page_plans_a_future_month(client, finance_user, member, team):
    client.force_login(finance_user)
    url = f"/billing/budgets/?period={_month(1):%Y-%m}"
    page = client.get(url).content.decode()
    assert f"Set a budget for {_month(1):%Y-%m}" in page
    saved = client.post(url, {"team": team.slug, "amount": "0", "enforcement": "block"})
    assert saved.status_code == 302
    assert Budget.objects.get().period.month == _month(1)

    too_far = f"/billing/budgets/?period={_month(13):%Y-%m}"
    refused = client.post(too_far, {"team": team.slug, "amount": "5", "enforcement": "block"})
    assert refused.status_code == 200
    assert "too far ahead" in refused.content.decode()
    assert Budget.objects.count() == 1  # neither that month nor this month got one

    client.force_login(member)
    page = client.get(url).content.decode()
    assert 'data-team="vision"' in page and "block" in page
