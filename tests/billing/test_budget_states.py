"""A team in `block` mode gets a clean answer in every budget state: a refusal with the reason
code `budget_exhausted` (never a server error) once nothing is left, a booking while it fits."""

from decimal import Decimal

import pytest

from apps.billing.choices import Enforcement
from apps.billing.models import BillingPeriod
from apps.billing.periods import month_start
from apps.billing.services import adjustment_create, budget_set
from apps.reservations.models import Reservation
from tests.conftest import client_for
from tests.reservations.conftest import booking

pytestmark = pytest.mark.django_db


def _block_budget(team, finance_user, start, *, amount: str, spent: str | None):
    period = BillingPeriod.objects.get_or_create(month=month_start(start))[0]
    budget_set(
        actor=finance_user, team=team, period=period, amount=Decimal(amount),
        enforcement=Enforcement.BLOCK,
    )  # fmt: skip
    if spent:
        adjustment_create(
            actor=finance_user, team=team, amount=Decimal(spent), reason="usage", period=period
        )
    return period


@pytest.mark.parametrize(
    ("amount", "spent", "left"),
    [
        ("30", "30", "0.00"),  # exactly spent
        ("30", "45.50", "-15.50"),  # overspent
        ("0", None, "0.00"),  # a zero budget
    ],
)
def test_booking_with_nothing_left_is_refused_with_budget_exhausted(
    member, quotas, finance_user, team, rates, tomorrow_9, amount, spent, left
):
    _block_budget(team, finance_user, tomorrow_9, amount=amount, spent=spent)
    response = client_for(member).post(
        "/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json"
    )
    assert response.status_code == 403, response.content
    body = response.json()
    assert body["code"] == "budget_exhausted"
    assert body["detail"]["left"] == left
    assert body["detail"]["booking_cost"] == "10.00"  # 2 GPUs x 2 h x 2.50
    assert "only 0.00 USD is left" in body["message"]
    assert not Reservation.objects.exists()


def test_booking_with_no_spend_yet_fits_its_budget(
    member, quotas, finance_user, team, rates, tomorrow_9
):
    _block_budget(team, finance_user, tomorrow_9, amount="10", spent=None)
    response = client_for(member).post(
        "/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json"
    )
    assert response.status_code == 201, response.content  # exactly the 10.00 that is left


def test_unpriced_booking_is_not_refused_by_an_exhausted_budget(
    member, quotas, finance_user, team, fleet, tomorrow_9
):
    _block_budget(team, finance_user, tomorrow_9, amount="0", spent=None)  # no rate card at all
    response = client_for(member).post(
        "/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json"
    )
    assert response.status_code == 201, response.content


def test_booking_form_shows_the_budget_refusal_inline(
    client, member, quotas, finance_user, team, rates, tomorrow_9
):
    _block_budget(team, finance_user, tomorrow_9, amount="30", spent="31")
    client.force_login(member)
    response = client.post(
        "/reservations/new/",
        {
            "team": "vision",
            "gpu_model": "H100-SXM-80GB",
            "count": 2,
            "start": tomorrow_9.strftime("%Y-%m-%dT%H:%M"),
            "duration_hours": "2",
            "tz_offset": "0",
        },
    )
    assert response.status_code == 200
    assert "only 0.00 USD is left of vision" in response.content.decode()
    assert not Reservation.objects.exists()


def test_budget_refusal_writes_amounts_with_separators_and_currency(
    member, quotas, finance_user, team, rates, tomorrow_9
):
    _block_budget(team, finance_user, tomorrow_9, amount="3668.16", spent="3660")
    response = client_for(member).post(
        "/api/v1/reservations/", booking(count=2, start=tomorrow_9), format="json"
    )
    assert response.status_code == 403, response.content
    message = response.json()["message"]
    assert "would cost 10.00 USD" in message
    assert "only 8.16 USD is left" in message
    assert "3,668.16 USD budget" in message
