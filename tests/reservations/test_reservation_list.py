"""The reservations page as a list: sortable columns and filters inside each tab, over the
user's own teams only; a bad filter value gets a message, never a 500 nor another team's rows."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import Gpu
from apps.reservations.choices import ReservationStatus
from tests.factories import UserFactory
from tests.factories import make_booking as _make_booking

pytestmark = pytest.mark.django_db


def _rows(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-reservation="(\d+)"', html)]


def make_booking(*args, **fields):
    return _make_booking(*args, status=ReservationStatus.SCHEDULED, **fields)


@pytest.fixture
def bookings(team, other_team, member, outsider, fleet):
    """Upcoming: three of the member's team (one by the member), two of another team."""
    gpus = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index"))
    soon = timezone.now().replace(microsecond=0) + timedelta(days=1)
    colleague = UserFactory(username="carl")
    ours = [
        make_booking(team, member, gpus[0:2], soon + timedelta(hours=2), soon + timedelta(hours=3),
                     purpose="bert sweep"),
        make_booking(team, colleague, gpus[2:3], soon, soon + timedelta(hours=5),
                     purpose="alexnet"),
        make_booking(team, colleague, gpus[3:6], soon + timedelta(hours=4),
                     soon + timedelta(hours=6), purpose="clip"),
    ]  # fmt: skip
    theirs = [
        make_booking(other_team, outsider, gpus[6:7], soon, soon + timedelta(hours=1),
                     purpose="secret a"),
        make_booking(other_team, outsider, gpus[7:8], soon + timedelta(hours=9),
                     soon + timedelta(hours=10), purpose="secret z"),
    ]  # fmt: skip
    return {"ours": [r.pk for r in ours], "theirs": [r.pk for r in theirs]}


def test_upcoming_soonest_first_and_headers_sort(client, member, bookings):
    client.force_login(member)
    ours = bookings["ours"]
    assert _rows(client.get("/reservations/").content.decode()) == [ours[1], ours[0], ours[2]]
    for sort in ("id", "team", "gpus", "start", "end", "status", "created_by", "purpose"):
        for direction in ("", "-"):
            html = client.get(f"/reservations/?sort={direction}{sort}").content.decode()
            assert sorted(_rows(html)) == sorted(ours), sort
    assert _rows(client.get("/reservations/?sort=-gpus").content.decode()) == [
        ours[2], ours[0], ours[1]
    ]  # fmt: skip
    assert _rows(client.get("/reservations/?sort=-end").content.decode()) == [
        ours[2], ours[1], ours[0]
    ]  # fmt: skip
    assert _rows(client.get("/reservations/?sort=purpose").content.decode()) == [
        ours[1], ours[0], ours[2]
    ]  # fmt: skip


def test_filters_apply_within_the_tab(client, member, bookings, h100):
    client.force_login(member)
    ours = bookings["ours"]
    assert _rows(client.get("/reservations/?when=upcoming&mine=on").content.decode()) == [ours[0]]
    assert _rows(client.get("/reservations/?q=clip").content.decode()) == [ours[2]]
    assert _rows(client.get("/reservations/?q=secret").content.decode()) == []
    html = client.get(f"/reservations/?team=vision&gpu_model={h100.name}").content.decode()
    assert sorted(_rows(html)) == sorted(ours)
    assert '<input type="hidden" name="when" value="upcoming">' in html
    assert _rows(client.get("/reservations/?when=past&team=vision").content.decode()) == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("team=nlp", "Team: Select a valid choice."),
        ("gpu_model=nonsense", "GPU model: Select a valid choice."),
    ],
)
def test_bad_or_foreign_filter_values_get_a_message_and_no_rows(
    client, member, bookings, query, message
):
    client.force_login(member)
    response = client.get(f"/reservations/?{query}")
    assert response.status_code == 200
    html = response.content.decode()
    assert message in html and _rows(html) == []
    assert "secret" not in html


def test_finance_sorts_and_filters_over_every_team(client, finance_user, bookings):
    client.force_login(finance_user)
    rows = _rows(client.get("/reservations/?sort=purpose").content.decode())
    assert sorted(rows) == sorted(bookings["ours"] + bookings["theirs"])
    assert rows[-2:] == bookings["theirs"]  # "secret a", "secret z" sort last
    assert _rows(client.get("/reservations/?team=nlp").content.decode()) == bookings["theirs"]
