"""Each user's time zone: learned from the browser, chosen on a page, used for mails."""

from datetime import UTC, datetime

import pytest

from apps.outbox.models import OutboxMessage
from apps.teams.models import User
from apps.teams.services import mail_in_their_zones
from portal.formatting import format_when
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

MOMENT = datetime(2026, 12, 6, 0, 0, tzinfo=UTC)


def _zone_shown(client) -> str:
    return client.get("/teams/").content.decode().split('data-time-zone="', 1)[1].split('"')[0]


def test_browser_zone_is_learned_once_and_used(client, member):
    client.force_login(member)
    assert _zone_shown(client) == "UTC"
    client.cookies["portal_tz"] = "America/New_York"
    assert _zone_shown(client) == "America/New_York"
    member.refresh_from_db()
    assert member.time_zone == "America/New_York"
    # A later browser elsewhere does not overwrite what the portal knows: the user chooses.
    client.cookies["portal_tz"] = "Asia/Tokyo"
    assert _zone_shown(client) == "America/New_York"


def test_a_bad_browser_zone_is_ignored(client, member):
    client.force_login(member)
    client.cookies["portal_tz"] = "Not/AZone<script>"
    assert _zone_shown(client) == "UTC"
    member.refresh_from_db()
    assert member.time_zone == ""


def test_anonymous_pages_follow_the_browser_zone(client):
    client.cookies["portal_tz"] = "Europe/Berlin"
    page = client.get("/login/").content.decode()
    assert 'data-time-zone="Europe/Berlin"' in page


def test_user_chooses_a_zone_and_is_told_the_time_there(client, member):
    client.force_login(member)
    client.cookies["portal_tz"] = "America/New_York"
    form = client.get("/teams/me/time-zone/").content.decode()
    assert "Your browser says you are in" in form and "America/New_York" in form
    response = client.post("/teams/me/time-zone/", {"time_zone": "Europe/Berlin"}, follow=True)
    page = response.content.decode()
    assert "Times now read in Europe/Berlin: it is" in page
    assert " CET." in page or " CEST." in page
    member.refresh_from_db()
    assert member.time_zone == "Europe/Berlin"
    assert _zone_shown(client) == "Europe/Berlin"


def test_an_unknown_zone_is_refused_on_the_form(client, member):
    member.time_zone = "America/New_York"
    member.save()
    client.force_login(member)
    response = client.post("/teams/me/time-zone/", {"time_zone": "Mars/Olympus"})
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    member.refresh_from_db()
    assert member.time_zone == "America/New_York"


def test_mails_are_written_once_per_recipients_zone(django_capture_on_commit_callbacks):
    ny = UserFactory(username="nyc", time_zone="America/New_York")
    ny2 = UserFactory(username="nyc2", time_zone="America/New_York")
    berlin = UserFactory(username="ber", time_zone="Europe/Berlin")
    unknown = UserFactory(username="anon")
    inactive = UserFactory(username="gone", time_zone="Asia/Tokyo", is_active=False)
    sent = mail_in_their_zones(
        users=[ny, ny2, berlin, unknown, inactive],
        subject="Booking ends",
        body=lambda: f"It ends {format_when(MOMENT)}.",
    )
    assert sent == 3
    bodies = {
        tuple(m.payload["recipients"]): m.payload["body"] for m in OutboxMessage.objects.all()
    }
    assert bodies == {
        ("nyc2@example.com", "nyc@example.com"): "It ends Dec 5, 2026, 19:00 EST.",
        ("ber@example.com",): "It ends Dec 6, 2026, 01:00 CET.",
        ("anon@example.com",): "It ends Dec 6, 2026, 00:00 UTC.",
    }
    assert User.objects.get(username="gone").email not in str(bodies)
