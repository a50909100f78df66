"""Booking GPUs through the Reserve page (suggested slots, local-time start, inline refusals),
the reservation list with cancel, the team calendar, and the quota admin page."""

import re
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlparse
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.audit.models import AuditEvent
from apps.fleet.models import GpuModel
from apps.reservations.choices import ReservationStatus
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.services import reservation_create
from apps.teams.models import Quota, Team, User
from portal.formatting import format_when
from portal.timezones import in_zone
from tests.browser.conftest import ARTIFACTS_DIR, DEFAULT_TIMEOUT_MS, login

H100 = "H100-SXM-80GB"
SLOT = timedelta(minutes=15)
# What the browser logs when the document itself answers 403.
FAILED_LOAD_403 = r"Failed to load resource: the server responded with a status of 403"


@pytest.fixture
def make_page(request, browser, live_server, demo_data, browser_errors):
    """``make_page(timezone_id=...)`` opens a page in a fresh browser context (its own cookies,
    optionally its own time zone). Console errors go to ``browser_errors`` like ``page``'s."""
    contexts = []

    def _make(**context_options):
        context = browser.new_context(base_url=live_server.url, **context_options)
        context.set_default_timeout(DEFAULT_TIMEOUT_MS)
        contexts.append(context)
        new_page = context.new_page()
        new_page.on("console", browser_errors.on_console)
        new_page.on("pageerror", browser_errors.on_pageerror)
        return new_page

    yield _make
    failed = any(
        getattr(request.node, f"rep_{when}", None) is not None
        and getattr(request.node, f"rep_{when}").failed
        for when in ("setup", "call")
    )
    for number, context in enumerate(contexts):
        if failed:
            ARTIFACTS_DIR.mkdir(exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
            for shot, open_page in enumerate(context.pages):
                try:
                    path = ARTIFACTS_DIR / f"{name}.context{number}.{shot}.png"
                    open_page.screenshot(path=str(path), full_page=True)
                except Exception as error:  # noqa: BLE001 - must not mask the failure
                    print(f"could not save screenshot: {error}")
        context.close()
    # Tests that also use `page` have their errors checked by its teardown.
    unexpected = browser_errors.unexpected()
    if unexpected and not failed and "page" not in request.fixturenames:
        pytest.fail("Browser reported errors:\n" + "\n".join(unexpected), pytrace=False)


def _now_clear_of_slot_edge() -> datetime:
    """The time now, at least 10 seconds before the next 15-minute slot starts, so that a
    window starting at the current slot is not in the past by the time it is booked."""
    now = timezone.now()
    if now - _floor_to_slot(now) > SLOT - timedelta(seconds=10):
        time.sleep(11)
        now = timezone.now()
    return now


def _floor_to_slot(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC).replace(second=0, microsecond=0)
    return moment - timedelta(minutes=moment.minute % 15)


def _local_input(moment: datetime, zone: str) -> str:
    """How a datetime-local input shows `moment` in the browser's time zone `zone`."""
    return moment.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%dT%H:%M")


def _take_all_h100(start: datetime, end: datetime) -> list[Reservation]:
    """Book all 16 H100s for [start, end) through the service: nlp 12 (bob, its limit) and
    robotics 4 (the platform admin, who may book for any team; robotics has no members)."""
    h100 = GpuModel.objects.get(name=H100)
    bookings = [
        reservation_create(
            team=Team.objects.get(slug=slug),
            user=User.objects.get(username=username),
            gpu_model=h100,
            count=count,
            start=start,
            end=end,
            purpose="blocker",
        )
        for slug, username, count in (("nlp", "bob", 12), ("robotics", "admin", 4))
    ]
    assert ReservationGpu.objects.filter(active=True, gpu__model=h100).count() == 16
    return bookings


def _fill_booking(page, *, count: int, hours: int, gpu_model: str = H100) -> None:
    page.get_by_label("Team").select_option("vision")
    page.get_by_label("GPU model").select_option(gpu_model)
    page.get_by_label("GPUs", exact=True).fill(str(count))
    page.get_by_label("Duration (hours)").fill(str(hours))


def _vision_reservations():
    return Reservation.objects.filter(team__slug="vision")


def test_member_books_suggested_slot_in_local_time_then_cancels(make_page):
    zone = "Europe/Berlin"
    # All H100s are taken for the next two hours, so the earliest slot lies in the future
    # (the booking is "upcoming" whatever the clock) and is known exactly: the blockers' end.
    blocked_from = _floor_to_slot(_now_clear_of_slot_edge())
    blocked_until = blocked_from + timedelta(hours=2)
    _take_all_h100(blocked_from, blocked_until)

    page = make_page(timezone_id=zone)
    dialogs = []

    def accept(dialog):
        dialogs.append((dialog.type, dialog.message))
        dialog.accept()

    page.on("dialog", accept)
    login(page, "alice")
    page.goto("/reservations/new/")
    expect(page.get_by_role("heading", name="Reserve GPUs")).to_be_visible()
    _fill_booking(page, count=4, hours=2)
    page.get_by_label("Purpose").fill("detector training")
    page.get_by_role("button", name="Find free slots").click()

    page.wait_for_url(re.compile(r"/reservations/new/\?"))
    # The search keeps what was typed, so "Book" books what the suggestions were found for.
    expect(page.get_by_label("GPU model")).to_have_value(H100)
    expect(page.get_by_label("GPUs", exact=True)).to_have_value("4")
    expect(page.get_by_label("Duration (hours)")).to_have_value("2")
    expect(page.get_by_label("Purpose")).to_have_value("detector training")
    expect(page.get_by_role("heading", name=f"Suggested slots · {H100}")).to_be_visible()
    first = page.get_by_test_id("suggestions").locator("li").first
    # Four GPUs on a single node (a list of nodes would have a comma).
    expect(first).to_contain_text(re.compile(r"· 4 GPUs on gpu-h100-0[12]\s+Use this slot$"))
    use = first.get_by_role("button", name="Use this slot")
    slot = datetime.fromisoformat(use.get_attribute("data-fill-start"))
    assert slot == blocked_until, f"first suggestion {slot}, expected {blocked_until}"
    # Its time is shown in the reader's zone (Berlin), not labelled UTC.
    expect(first.locator("time").first).to_have_attribute(
        "datetime", slot.astimezone(UTC).isoformat()
    )
    expect(first).not_to_contain_text("UTC")
    # The free-capacity table shows the blocked H100s: none free in the current block.
    timeline = page.get_by_test_id("timeline")
    expect(timeline.locator("tbody td:not(.past)").first).to_have_text("0")
    expect(timeline.locator("tbody td:not(.past)").first).to_have_class(re.compile(r"\bfull\b"))
    # Later blocks count what vision may book: its limit of 8, not the fleet's 16 free H100s.
    expect(timeline.locator("tbody td", has_text=re.compile(r"^8$")).first).to_be_visible()
    expect(timeline.locator("tbody td", has_text=re.compile(r"^16$"))).to_have_count(0)

    start_field = page.get_by_label("Start")
    use.click()
    expect(start_field).to_have_value(_local_input(slot, zone))
    berlin_offset = slot.astimezone(ZoneInfo(zone)).utcoffset()
    expect(page.locator("input[name=tz_offset]")).to_have_value(
        str(-int(berlin_offset.total_seconds() // 60))
    )
    page.get_by_role("button", name="Book", exact=True).click()

    page.wait_for_url("**/reservations/")
    message = page.get_by_role("status")
    expect(message).to_contain_text(re.compile(r"Booked: reservation #\d+\."))
    pk = int(re.search(r"#(\d+)", message.inner_text()).group(1))

    reservation = Reservation.objects.select_related("team", "gpu_model", "created_by").get(pk=pk)
    assert (reservation.team.slug, reservation.gpu_model.name) == ("vision", H100)
    assert reservation.created_by.username == "alice"
    assert reservation.count == 4
    assert reservation.start == slot, "the local start was not converted back to the slot's UTC"
    assert reservation.end == slot + timedelta(hours=2)
    assert reservation.status == ReservationStatus.SCHEDULED
    assert reservation.purpose == "detector training"
    holdings = ReservationGpu.objects.filter(reservation=reservation, active=True)
    assert holdings.count() == 4
    assert len(set(holdings.values_list("gpu__node__hostname", flat=True))) == 1
    assert set(holdings.values_list("start", "end")) == {(reservation.start, reservation.end)}

    row = page.locator(f'tr[data-reservation="{pk}"]')
    expect(row).to_have_count(1)
    expect(row).to_contain_text(f"4 × {H100}")
    expect(row).to_contain_text("Scheduled")
    expect(row).to_contain_text("alice")
    expect(row).to_contain_text("detector training")
    expect(row.locator("time").first).to_have_attribute(
        "datetime", slot.astimezone(UTC).isoformat()
    )
    # Only vision's booking is listed to alice: the blockers belong to other teams.
    expect(page.locator("tr[data-reservation]")).to_have_count(1)

    page.goto("/reservations/calendar/vision/")
    calendar = page.get_by_test_id("calendar")
    bookings = calendar.locator(".booking")
    # One entry, or two when the booking crosses midnight in the reader's zone.
    expect(bookings.first).to_contain_text(f"#{pk} 4×{H100} ")
    # Its times in the reader's zone, the zone named, as on every page.
    times = bookings.first.locator("time")
    expect(times.first).to_have_attribute("datetime", slot.astimezone(UTC).isoformat())
    local = slot.astimezone(ZoneInfo(zone))
    expect(times.first).to_contain_text(f"{local:%H:%M} {local.tzname()}")
    expect(bookings.first).to_contain_text("alice")
    assert bookings.count() in (1, 2)
    for index in range(bookings.count()):
        expect(bookings.nth(index)).to_contain_text(f"#{pk} ")

    page.goto("/reservations/")
    row = page.locator(f'tr[data-reservation="{pk}"]')
    row.get_by_role("button", name=f"Cancel reservation {pk}").click()
    page.wait_for_load_state()
    expect(page.get_by_role("status")).to_contain_text(
        f"Reservation #{pk} cancelled; its GPUs are free again."
    )
    assert dialogs == [("confirm", f"Cancel reservation #{pk}? Its GPUs are freed at once.")]
    expect(page.get_by_role("link", name="Upcoming")).to_have_attribute("aria-current", "page")
    expect(page.locator(f'tr[data-reservation="{pk}"]')).to_have_count(0)
    expect(page.get_by_test_id("reservation-table")).to_contain_text("No upcoming reservations.")
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.CANCELLED
    assert not ReservationGpu.objects.filter(reservation=reservation, active=True).exists()

    page.get_by_role("link", name="Past").click()
    expect(page.locator(f'tr[data-reservation="{pk}"]')).to_contain_text("Cancelled")


def test_conflict_shows_inline_error_and_next_free_slot(make_page):
    zone = "America/New_York"
    window_start = _floor_to_slot(timezone.now()).replace(minute=0) + timedelta(days=2)
    window_end = window_start + timedelta(hours=3)
    _take_all_h100(window_start, window_end)

    page = make_page(timezone_id=zone)
    login(page, "alice")
    page.goto("/reservations/new/")
    _fill_booking(page, count=1, hours=3)
    start_field = page.get_by_label("Start")
    start_field.fill(_local_input(window_start, zone))
    page.get_by_role("button", name="Book", exact=True).click()

    error = page.get_by_test_id("booking-error")
    expect(error).to_have_attribute("role", "alert")
    with in_zone(zone):  # alice's browser told the portal her zone at login
        expect(error).to_contain_text(
            f"Only 0 {H100} GPUs are free from {format_when(window_start)} to "
            f"{format_when(window_end)}; you asked for 1. Next free slot starts "
            f"{format_when(window_end)}."
        )
    assert urlparse(page.url).path == "/reservations/new/"
    assert not _vision_reservations().exists(), "a refused booking wrote a reservation"
    # The typed values are kept.
    expect(start_field).to_have_value(_local_input(window_start, zone))
    expect(page.get_by_label("GPUs", exact=True)).to_have_value("1")

    next_slot = error.get_by_role("button", name="Use the next free slot")
    expect(next_slot).to_be_visible()
    assert datetime.fromisoformat(next_slot.get_attribute("data-fill-start")) == window_end
    next_slot.click()
    expect(start_field).to_have_value(_local_input(window_end, zone))

    # The filled-in slot really is bookable.
    page.get_by_role("button", name="Book", exact=True).click()
    page.wait_for_url("**/reservations/")
    expect(page.get_by_role("status")).to_contain_text("Booked: reservation #")
    booking = _vision_reservations().get()
    assert (booking.start, booking.end, booking.count) == (
        window_end,
        window_end + timedelta(hours=3),
        1,
    )


def test_quota_exceeded_shows_inline_error(page):
    login(page, "alice")
    page.goto("/reservations/new/")
    _fill_booking(page, count=9, hours=1)
    start = timezone.localtime().replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
    page.get_by_label("Start").fill(start.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_role("button", name="Book", exact=True).click()

    error = page.get_by_test_id("booking-error")
    expect(error).to_contain_text("Quota exceeded")
    expect(error).to_contain_text(f"team vision may hold 8 GPUs of {H100}")
    expect(error).to_contain_text("you asked for 9")
    expect(error.get_by_role("button", name="Use the next free slot")).to_have_count(0)
    assert urlparse(page.url).path == "/reservations/new/"
    expect(page.get_by_label("GPUs", exact=True)).to_have_value("9")
    assert not _vision_reservations().exists()
    assert not ReservationGpu.objects.exists()


def test_member_extends_booking_from_list(page):
    start = _floor_to_slot(timezone.now()).replace(minute=0) + timedelta(days=1)
    booking = reservation_create(
        team=Team.objects.get(slug="vision"),
        user=User.objects.get(username="alice"),
        gpu_model=GpuModel.objects.get(name="L40S-48GB"),
        count=2,
        start=start,
        end=start + timedelta(hours=2),
    )
    login(page, "alice")
    page.goto("/reservations/")
    row = page.locator(f'tr[data-reservation="{booking.pk}"]')
    expect(row).to_contain_text("2 × L40S-48GB")
    row.get_by_label(f"Extra hours for reservation {booking.pk}").fill("1.5")
    row.get_by_role("button", name=f"Extend reservation {booking.pk}").click()

    new_end = start + timedelta(hours=3, minutes=30)
    expect(page.get_by_role("status")).to_contain_text(
        f"Reservation #{booking.pk} now ends {format_when(new_end)}."
    )
    booking.refresh_from_db()
    assert booking.end == new_end
    holdings = ReservationGpu.objects.filter(reservation=booking, active=True)
    assert list(holdings.values_list("end", flat=True)) == [new_end, new_end]
    expect(page.locator(f'tr[data-reservation="{booking.pk}"] time').nth(1)).to_have_attribute(
        "datetime", new_end.isoformat()
    )


def _quota_row(page, key: str):
    return page.locator(f'tr[data-quota="{key}"]')


def test_admin_raises_quota_limit_and_member_sees_it(page, make_page):
    login(page, "admin")
    page.goto("/quotas/")
    history = page.get_by_test_id("quota-history")
    expect(history).to_contain_text("No quota changes yet.")
    row = _quota_row(page, f"vision/{H100}")
    limit = row.get_by_label(f"Limit for vision {H100}")
    expect(limit).to_have_value("8")
    expect(row.get_by_label(f"Guaranteed GPUs for vision {H100}")).to_have_value("4")

    limit.fill("10")
    row.get_by_role("button", name=f"Save quota of vision {H100}").click()

    page.wait_for_url("**/quotas/")
    expect(page.get_by_role("status")).to_contain_text("Quota of vision saved.")
    saved_row = _quota_row(page, f"vision/{H100}")
    expect(saved_row.get_by_label(f"Limit for vision {H100}")).to_have_value("10")
    entries = history.locator("tbody tr")
    expect(entries).to_have_count(1)
    cells = entries.first.locator("td")
    expect(cells.nth(1)).to_have_text("admin")
    expect(cells.nth(2)).to_have_text(f"vision/{H100}")
    expect(cells.nth(3)).to_have_text("4 / 8")
    expect(cells.nth(4)).to_have_text("4 / 10")
    quota = Quota.objects.get(team__slug="vision", gpu_model__name=H100)
    assert (quota.guaranteed, quota.limit) == (4, 10)
    # The other rows are untouched.
    assert Quota.objects.get(team__slug="vision", gpu_model__name="L40S-48GB").limit == 4

    alice = make_page()
    login(alice, "alice")
    alice.goto("/teams/vision/")
    table = alice.get_by_test_id("team-quota")
    h100_row = table.locator("tbody tr", has=alice.locator("td", has_text=H100))
    expect(h100_row.locator("td")).to_have_text([H100, "4", "10", "0", "0", "10"])
    l40s_row = table.locator("tbody tr", has=alice.locator("td", has_text="L40S-48GB"))
    expect(l40s_row.locator("td").nth(2)).to_have_text("4")


def test_admin_limit_below_guarantee_is_refused(page):
    login(page, "admin")
    page.goto("/quotas/")
    row = _quota_row(page, f"vision/{H100}")
    row.get_by_label(f"Limit for vision {H100}").fill("2")
    row.get_by_role("button", name=f"Save quota of vision {H100}").click()

    error = page.get_by_test_id("quota-error")
    expect(error).to_have_attribute("role", "alert")
    expect(error).to_contain_text("The limit (2) must be at least guaranteed (4).")
    expect(page.get_by_role("status")).to_have_count(0)
    quota = Quota.objects.get(team__slug="vision", gpu_model__name=H100)
    assert (quota.guaranteed, quota.limit) == (4, 8)
    assert not AuditEvent.objects.filter(object_type="teams.quota").exists()
    expect(page.get_by_test_id("quota-history")).to_contain_text("No quota changes yet.")


def test_finance_reads_quotas_without_editing(page):
    login(page, "fran")
    page.goto("/quotas/")
    row = _quota_row(page, f"vision/{H100}")
    expect(row.locator("td")).to_have_count(6)
    expect(row.locator("td").nth(2)).to_have_text("4")
    expect(row.locator("td").nth(3)).to_have_text("8")
    expect(page.get_by_test_id("quota-table").locator("input")).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile("^Save"))).to_have_count(0)


def test_member_gets_403_page_for_quotas(page, browser_errors):
    browser_errors.allow(FAILED_LOAD_403)
    login(page, "alice")
    response = page.goto("/quotas/")
    assert response.status == 403
    expect(page.get_by_role("heading", level=1)).to_have_text("403 · Not allowed")
    expect(page.locator("main")).to_contain_text(
        "Only platform admins, unit admins and finance can see quotas."
    )
    expect(page.get_by_test_id("quota-table")).to_have_count(0)
    expect(page.get_by_test_id("nav")).to_be_visible()


def test_start_is_read_in_browser_zone_whatever_the_server_zone(make_page, settings):
    settings.TIME_ZONE = "Asia/Tokyo"
    zone = "Europe/Berlin"
    start = _floor_to_slot(timezone.now()).replace(minute=0) + timedelta(days=3)
    page = make_page(timezone_id=zone)
    login(page, "alice")
    page.goto("/reservations/new/")
    _fill_booking(page, count=1, hours=1)
    page.get_by_label("Start").fill(_local_input(start, zone))
    page.get_by_role("button", name="Book", exact=True).click()
    page.wait_for_url("**/reservations/")
    assert _vision_reservations().get().start == start
