"""A reader in New York sees and types every booking time in New York time, named: messages,
the team calendar, the free-GPU grid, the job form's reservation choices, audit labels and
the mails about their bookings."""

import re
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.outbox.models import OutboxMessage
from apps.reservations.models import Reservation
from apps.reservations.services import reservation_cancel, reservation_create
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db

NEW_YORK = ZoneInfo("America/New_York")


def _saturday_evening_in_new_york() -> datetime:
    """19:00 New York time on a Saturday 1 to 7 days from now (always ahead, and inside the
    booking form's grid of today and the next 7 days): Sunday in UTC."""
    today = timezone.now().astimezone(NEW_YORK).date()
    ahead = (5 - today.weekday()) % 7 or 7
    return datetime.combine(today + timedelta(days=ahead), time(19), NEW_YORK)


@pytest.fixture
def new_yorker(member):
    member.time_zone = "America/New_York"
    member.save()
    return member


@pytest.fixture
def saturday_booking(new_yorker, quotas, h100):
    start = _saturday_evening_in_new_york()
    assert start.astimezone(UTC).weekday() == 6  # Sunday in UTC
    return reservation_create(
        team=quotas[0].team,
        user=new_yorker,
        gpu_model=h100,
        count=2,
        start=start,
        end=start + timedelta(hours=3),
    )


def _calendar_rows(page: str) -> dict[str, str]:
    body = page[page.index('data-testid="calendar"') :]
    return dict(re.findall(r'<tr><th scope="row">([^<]+)</th><td>(.*?)</td></tr>', body, re.S))


def test_team_calendar_lays_a_saturday_evening_booking_on_saturday(
    client, new_yorker, saturday_booking
):
    client.force_login(new_yorker)
    page = client.get("/reservations/calendar/vision/").content.decode()
    assert "Day (EST)" in page or "Day (EDT)" in page
    rows = _calendar_rows(page)
    first_day = timezone.now().astimezone(NEW_YORK).date()
    assert next(iter(rows)) == f"{first_day:%a %d %b}"
    on = [day for day, cell in rows.items() if f"#{saturday_booking.pk} " in cell]
    assert on == [f"{saturday_booking.start.astimezone(NEW_YORK):%a %d %b}"]
    assert on[0].startswith("Sat")
    assert "19:00 E" in rows[on[0]]


def test_free_gpu_grid_has_the_readers_days_and_hours(client, new_yorker, saturday_booking):
    client.force_login(new_yorker)
    page = client.get("/reservations/new/?team=vision&gpu_model=H100-SXM-80GB").content.decode()
    grid = page[page.index('data-testid="timeline"') :]
    assert "days and hours in E" in page
    header = re.search(r'<thead><tr><th scope="col">Day</th><th scope="col">([\d:]+)</th>', grid)
    assert header.group(1) == "00:00"
    saturday = f"{saturday_booking.start.astimezone(NEW_YORK):%a %d %b}"
    row = re.search(rf'<tr><th scope="row">{saturday}</th>(.*?)</tr>', grid, re.S).group(1)
    # vision may hold 12 H100s and holds 2 from 19:00 to 22:00: 10 more in Saturday's 18:00
    # and 21:00 blocks, 12 in its 15:00 block.
    assert re.search(r'title="10 free from 18:00 E[SD]T">10<', row)
    assert re.search(r'title="10 free from 21:00 E[SD]T">10<', row)
    assert re.search(r'title="12 free from 15:00 E[SD]T">12<', row)


def test_extend_message_names_the_readers_zone(client, new_yorker, saturday_booking):
    client.force_login(new_yorker)
    response = client.post(
        f"/reservations/{saturday_booking.pk}/extend/", {"extra_hours": "1"}, follow=True
    )
    end = saturday_booking.start.astimezone(NEW_YORK) + timedelta(hours=4)
    expected = f"now ends {end:%b} {end.day}, {end.year}, 23:00 {end.tzname()}."
    assert expected in response.content.decode()


def test_job_form_offers_the_booking_in_the_readers_zone(client, new_yorker, saturday_booking):
    client.force_login(new_yorker)
    page = client.get("/jobs/submit/").content.decode()
    option = re.search(rf'<option value="{saturday_booking.pk}">([^<]+)</option>', page).group(1)
    assert re.search(r", 19:00 – 22:00 E[SD]T$", option), option


def test_booking_form_without_the_browser_offset_reads_the_readers_zone(client, new_yorker, quotas):
    client.force_login(new_yorker)
    start = _saturday_evening_in_new_york()
    client.post(
        "/reservations/new/",
        {
            "team": "vision",
            "gpu_model": "H100-SXM-80GB",
            "count": 1,
            "start": start.strftime("%Y-%m-%dT%H:%M"),
            "duration_hours": "2",
        },
    )
    assert Reservation.objects.get().start == start


def test_audit_label_of_a_booking_names_the_zone(client, saturday_booking, platform_admin):
    platform_admin.time_zone = "America/New_York"
    platform_admin.save()
    client.force_login(platform_admin)
    client.post(
        f"/reservations/{saturday_booking.pk}/cancel/", {"reason": "rack move"}, follow=True
    )
    label = AuditEvent.objects.get(action="reservation.force_cancel").object_repr
    assert re.search(r", 19:00 – 22:00 E[SD]T$", label), label


def test_mails_about_a_booking_use_each_recipients_zone(
    new_yorker, saturday_booking, platform_admin, team_admin
):
    team_admin.time_zone = "Europe/Berlin"
    team_admin.save()
    TeamFactory(slug="unrelated")
    reservation_cancel(reservation=saturday_booking, actor=platform_admin, reason="fleet move")
    bodies = {m.payload["recipients"][0]: m.payload["body"] for m in OutboxMessage.objects.all()}
    local = saturday_booking.start.astimezone(NEW_YORK)
    berlin = saturday_booking.start.astimezone(ZoneInfo("Europe/Berlin"))
    assert (
        f"{local:%b} {local.day}, {local.year}, 19:00 – 22:00 {local.tzname()}"
        in (bodies[new_yorker.email])
    )
    assert (
        f"{berlin:%b} {berlin.day}, {berlin.year}, 01:00 – 04:00 {berlin.tzname()}"
        in (bodies[team_admin.email])
    )
