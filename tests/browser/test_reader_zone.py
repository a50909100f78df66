"""A reader in New York (browser and profile) sees a Saturday-evening booking on Saturday in the
team calendar and the free-GPU grid, gets messages in their zone, named, and can choose
another zone."""

import re
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.fleet.models import GpuModel
from apps.reservations.services import reservation_create
from apps.teams.models import Team, User
from tests.browser.conftest import DEFAULT_TIMEOUT_MS, login

NEW_YORK = ZoneInfo("America/New_York")


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


@pytest.fixture
def saturday_booking():
    """alice (profile in New York) books 19:00-22:00 New York time on the coming Saturday:
    Sunday 00:00-03:00 in UTC."""
    alice = User.objects.get(username="alice")
    alice.time_zone = "America/New_York"
    alice.save()
    today = timezone.now().astimezone(NEW_YORK).date()
    ahead = (5 - today.weekday()) % 7 or 7  # 1 to 7 days: inside the form's 8-day grid
    start = datetime.combine(today + timedelta(days=ahead), time(19), NEW_YORK)
    return reservation_create(
        team=Team.objects.get(slug="vision"),
        user=alice,
        gpu_model=GpuModel.objects.get(name="L40S-48GB"),
        count=1,
        start=start,
        end=start + timedelta(hours=3),
        purpose="saturday evening",
    )


def test_saturday_evening_booking_is_on_saturday_and_messages_name_the_zone(
    new_york_page, saturday_booking
):
    page = new_york_page
    login(page, "alice")
    local = saturday_booking.start.astimezone(NEW_YORK)
    expect(page.get_by_test_id("reader-zone")).to_have_text(re.compile(r"^E[SD]T$"))

    page.goto("/reservations/calendar/vision/")
    header = page.locator("table.calendar thead th").first
    expect(header).to_have_text(re.compile(r"Day \(E[SD]T\)"))
    row = page.locator("table.calendar tbody tr", has=page.locator(
        ".booking", has_text=f"#{saturday_booking.pk} "
    ))  # fmt: skip
    expect(row).to_have_count(1)
    expect(row.locator("th")).to_have_text(f"{local:%a %d %b}")
    assert row.locator("th").inner_text().startswith("Sat")
    expect(row.locator("time").first).to_have_text(
        f"{local:%b} {local.day}, {local.year}, 19:00 {local.tzname()}"
    )

    page.goto("/reservations/?when=upcoming")
    page.get_by_role("button", name=f"Extend reservation {saturday_booking.pk}").click()
    message = page.locator(".messages .message.success")
    expect(message).to_have_text(
        f"Reservation #{saturday_booking.pk} now ends "
        f"{local:%b} {local.day}, {local.year}, 23:00 {local.tzname()}."
    )


def test_free_gpu_grid_rows_are_the_readers_days(new_york_page, saturday_booking):
    page = new_york_page
    login(page, "alice")
    page.goto("/reservations/new/?team=vision&gpu_model=L40S-48GB")
    grid = page.get_by_test_id("timeline")
    expect(grid.locator("thead th").nth(1)).to_have_text("00:00")
    local = saturday_booking.start.astimezone(NEW_YORK)
    saturday = grid.locator("tbody tr", has=page.locator("th", has_text=f"{local:%a %d %b}"))
    free = saturday.locator("td").nth(6)  # the 18:00-21:00 block
    expect(free).to_have_attribute("title", re.compile(r"free from 18:00 E[SD]T$"))


def test_reader_chooses_another_zone(new_york_page, saturday_booking):
    page = new_york_page
    login(page, "alice")
    page.get_by_test_id("reader-zone").click()
    expect(page.get_by_test_id("browser-zone")).to_have_text("America/New_York")
    page.get_by_label("Time zone").select_option("Europe/Berlin")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages .message.success")).to_contain_text(
        "Times now read in Europe/Berlin"
    )
    expect(page.get_by_test_id("reader-zone")).to_have_text(re.compile(r"^CES?T$"))
    page.goto("/reservations/calendar/vision/")
    berlin = saturday_booking.start.astimezone(ZoneInfo("Europe/Berlin"))
    row = page.locator("table.calendar tbody tr", has=page.locator(
        ".booking", has_text=f"#{saturday_booking.pk} "
    ))  # fmt: skip
    expect(row.locator("th")).to_have_text(f"{berlin:%a %d %b}")
    assert row.locator("th").inner_text().startswith("Sun")


@pytest.fixture
def berlin_page(browser, live_server, demo_data, browser_errors):
    context = browser.new_context(base_url=live_server.url, timezone_id="Europe/Berlin")
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = context.new_page()
    page.on("console", browser_errors.on_console)
    page.on("pageerror", browser_errors.on_pageerror)
    yield page
    context.close()
    assert not browser_errors.unexpected(), browser_errors.unexpected()


def test_booking_start_is_typed_in_the_chosen_zone_whatever_the_browser(berlin_page):
    """alice chose New York and travels with a laptop set to Berlin: she types New York time."""
    from apps.reservations.models import Reservation

    alice = User.objects.get(username="alice")
    alice.time_zone = "America/New_York"
    alice.save()
    page = berlin_page
    login(page, "alice")
    page.goto("/reservations/new/")
    expect(page.locator("label[for=id_start]")).to_contain_text("(America/New_York)")
    today = timezone.now().astimezone(NEW_YORK).date()
    start = datetime.combine(today + timedelta(days=3), time(19), NEW_YORK)
    page.get_by_label("Team").select_option("vision")
    page.get_by_label("GPU model").select_option("L40S-48GB")
    page.get_by_label("GPUs", exact=True).fill("1")
    page.get_by_label("Start").fill(start.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("Duration (hours)").fill("2")
    page.get_by_role("button", name="Book", exact=True).click()
    page.wait_for_url(lambda url: "/reservations/new/" not in url)
    assert Reservation.objects.get(team__slug="vision").start == start
