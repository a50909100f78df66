"""One time rule in the browser: a reader in New York sees the same booking as the same string,
in their own zone and naming it, on the home page, the reservation list and the team calendar;
every other time on the pages follows the same format; charts draw times in that zone too."""

import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.fleet.models import GpuModel
from apps.reservations.services import reservation_create
from apps.teams.models import Team, User
from tests.browser.conftest import DEFAULT_TIMEOUT_MS, login

NEW_YORK = ZoneInfo("America/New_York")
# "Dec 4, 2026, 04:00 EST": month, day, year, 24-hour clock, zone named.
ONE_FORMAT = re.compile(r"^[A-Z][a-z]{2} \d{1,2}, \d{4}, \d\d:\d\d E[SD]T$")


@pytest.fixture
def new_york_page(browser, live_server, demo_data, browser_errors):
    context = browser.new_context(base_url=live_server.url, timezone_id="America/New_York")
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = context.new_page()
    page.on("console", browser_errors.on_console)
    page.on("pageerror", browser_errors.on_pageerror)
    yield page
    context.close()
    assert not browser_errors.unexpected(), browser_errors.unexpected()


def _as_new_yorker_reads_it(moment) -> str:
    local = moment.astimezone(NEW_YORK)
    return f"{local:%b} {local.day}, {local.year}, {local:%H:%M} {local.tzname()}"


@pytest.fixture
def booking():
    tomorrow = timezone.now() + timedelta(days=1)
    start = tomorrow.replace(hour=14, minute=0, second=0, microsecond=0)
    return reservation_create(
        team=Team.objects.get(slug="vision"),
        user=User.objects.get(username="alice"),
        gpu_model=GpuModel.objects.get(name="L40S-48GB"),
        count=1,
        start=start,
        end=start + timedelta(hours=3),
        purpose="time rule",
    )


def test_same_booking_same_string_on_home_list_and_calendar(new_york_page, booking):
    page = new_york_page
    login(page, "alice")
    start, end = _as_new_yorker_reads_it(booking.start), _as_new_yorker_reads_it(booking.end)
    assert start.endswith(("EST", "EDT")) and start != booking.start.strftime(
        "%b %-d, %Y, %H:%M UTC"
    )

    page.goto("/")
    on_home = page.get_by_test_id("home-team-vision").locator("time")
    expect(on_home.first).to_have_text(start)
    expect(on_home.nth(1)).to_have_text(end)

    page.goto("/reservations/")
    row = page.locator(f"tr[data-reservation='{booking.pk}'] time")
    expect(row.first).to_have_text(start)
    expect(row.nth(1)).to_have_text(end)

    page.goto("/reservations/calendar/vision/")
    entry = page.locator(".booking", has_text=f"#{booking.pk} ").first.locator("time")
    expect(entry.first).to_have_text(start)
    expect(entry.nth(1)).to_have_text(end)

    # The UTC the server wrote stays at hand as a tooltip.
    assert entry.first.get_attribute("title").endswith(" UTC")


def test_every_time_on_admin_pages_follows_the_one_format(new_york_page, booking):
    page = new_york_page
    login(page, "admin")
    for path in ("/", "/reservations/", "/fleet/", "/audit/", "/billing/rate-cards/"):
        page.goto(path)
        texts = page.locator("time[data-style='datetime']").all_inner_texts()
        bad = [t for t in texts if not ONE_FORMAT.match(t)]
        assert not bad, (path, bad)


def test_chart_times_are_drawn_in_the_readers_zone(new_york_page, booking):
    page = new_york_page
    login(page, "admin")
    window = f"start={_iso_z(booking.start - timedelta(hours=1))}&end={_iso_z(booking.end)}"
    page.goto(f"/dashboards/occupancy/?range=custom&{window}")
    chart = page.locator("[data-figure='gantt']")
    expect(chart.locator(".main-svg").first).to_be_visible()
    layout = page.evaluate(
        "() => { const el = document.querySelector(\"[data-figure='gantt']\");"
        " return {title: el.layout.xaxis.title.text, base: el.data[0].base[0]}; }"
    )
    local = booking.start.astimezone(NEW_YORK)
    assert layout["title"] == f"Time ({local.tzname()})"
    assert layout["base"] == f"{local:%Y-%m-%d %H:%M:%S}"


def _iso_z(moment) -> str:
    return moment.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%MZ")
