"""The occupancy chart shows what the holding rows say was held (`apps.reservations.holdings`):
a booking cancelled half-way shows the part it ran (metering charges that part), which the
chart used to hide by leaving out every cancelled booking."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.dashboards.selectors.filters import Filters
from apps.dashboards.selectors.occupancy import occupancy
from apps.reservations.services import reservation_cancel
from tests.factories import make_booking

pytestmark = pytest.mark.django_db


def test_a_booking_cancelled_half_way_shows_up_to_the_cancel(fleet, h100, team, member):
    now = timezone.now()
    gpu = h100.gpus.order_by("id").first()
    ran = make_booking(team, member, [gpu], now - timedelta(hours=2), now + timedelta(hours=2))
    never = make_booking(
        team,
        member,
        [h100.gpus.order_by("id")[1]],
        now + timedelta(hours=1),
        now + timedelta(hours=3),
    )
    reservation_cancel(reservation=ran, actor=member)
    reservation_cancel(reservation=never, actor=member)
    filters = Filters(
        start=now - timedelta(hours=6),
        end=now + timedelta(hours=6),
        range="custom",
        teams=(team,),
        team_slug="",
        gpu_model=None,
        sees_all=False,
    )
    items = occupancy(filters)
    assert [item["label"] for item in items] == [f"booking #{ran.pk}"]
    assert items[0]["start"] == now - timedelta(hours=2)
    assert now <= items[0]["end"] < now + timedelta(minutes=1)
