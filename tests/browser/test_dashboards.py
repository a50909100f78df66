"""Flow 4: every dashboard draws its charts, for each role, without console errors (the page
fixture fails the test on any); and a booking shows on the occupancy chart until cancelled.

With SAVE_SCREENSHOTS=1 the platform admin's run saves the dashboards, with the demo's
telemetry history, to docs/screenshots/ (README.md shows them)."""

import os
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.dashboards.demo import seed_billing_demo, seed_dashboard_history
from apps.fleet.models import GpuModel
from apps.reservations.services import reservation_create
from apps.teams.models import Team, User

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SAVE_SCREENSHOTS = os.environ.get("SAVE_SCREENSHOTS", "") == "1"
DASHBOARDS = {
    "utilization": ["allocated-busy", "util-team-model"],
    "idle": ["gpu-states", "idle-hours"],
    "occupancy": ["gantt"],
    "fleet": ["node-status", "gpu-health", "thermal"],
}


@pytest.fixture
def telemetry_history():
    """Five weeks of metered bookings, two running now, and the telemetry that goes with them."""
    seed_billing_demo()
    now = timezone.now()
    slot = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    for slug, username, model, count in (
        ("nlp", "bob", "H100-SXM-80GB", 8),
        ("vision", "alice", "L40S-48GB", 2),
    ):
        reservation_create(
            team=Team.objects.get(slug=slug),
            user=User.objects.get(username=username),
            gpu_model=GpuModel.objects.get(name=model),
            count=count,
            start=slot,
            end=slot + timedelta(hours=6),
            purpose="running now",
        )
    seed_dashboard_history()


def _expect_charts(page, figures):
    for name in figures:
        chart = page.locator(f"[data-figure='{name}']")
        expect(chart).to_have_count(1)
        expect(chart.locator(".main-svg").first).to_be_visible()


@pytest.mark.parametrize(
    ("username", "pages"),
    [
        ("alice", ["utilization", "idle", "occupancy"]),
        ("fran", ["utilization", "idle", "occupancy"]),
        ("admin", ["utilization", "idle", "occupancy", "fleet"]),
    ],
)
def test_dashboards_render_charts_for_each_role(login_as, telemetry_history, username, pages):
    page = login_as(username)
    page.set_viewport_size({"width": 1440, "height": 900})
    for name in pages:
        range_ = "7d" if name in ("utilization", "occupancy") else "30d"
        page.goto(f"/dashboards/{name}/?range={range_}")
        expect(page.get_by_role("heading", level=1)).to_be_visible()
        _expect_charts(page, DASHBOARDS[name])
        if SAVE_SCREENSHOTS and username == "admin":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"dashboard-{name}.png"), full_page=True)


def test_filters_are_keyboard_reachable_and_apply(login_as, telemetry_history):
    page = login_as("admin")
    page.goto("/dashboards/utilization/")
    page.get_by_label("Range", exact=True).select_option("30d")
    page.get_by_label("Team", exact=True).select_option("vision")
    page.get_by_label("Team", exact=True).focus()
    page.keyboard.press("Tab")
    expect(page.get_by_label("GPU model", exact=True)).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Show")).to_be_focused()
    page.keyboard.press("Enter")
    page.wait_for_url("**/dashboards/utilization/?range=30d&*team=vision*")
    legend = page.locator("[data-figure='allocated-busy'] .legendtext")
    expect(legend.first).to_be_visible()
    assert set(legend.all_text_contents()) == {"vision allocated", "vision busy"}


def test_charts_side_by_side_on_wide_screens_stacked_on_small_laptops(login_as, telemetry_history):
    page = login_as("admin")
    page.set_viewport_size({"width": 2000, "height": 1000})
    page.goto("/dashboards/utilization/?range=7d")
    first = page.locator("[data-figure='allocated-busy']").bounding_box()
    second = page.locator("[data-figure='util-team-model']").bounding_box()
    assert abs(first["y"] - second["y"]) < 5 and second["x"] > first["x"]
    # A small laptop: one chart per row, and nothing wider than the window.
    page.set_viewport_size({"width": 1024, "height": 768})
    page.reload()
    first = page.locator("[data-figure='allocated-busy']").bounding_box()
    second = page.locator("[data-figure='util-team-model']").bounding_box()
    assert second["y"] > first["y"]
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_idle_page_says_which_signal_each_gpu_is_judged_on(login_as, telemetry_history):
    page = login_as("admin")
    page.goto("/dashboards/idle/?range=24h")
    # The demo's H100s report SM activity (GPM); its A100s and L40S only utilization %.
    counts = page.get_by_test_id("signal-counts")
    expect(counts).to_contain_text("SM activity (GPM) for")
    expect(counts).to_contain_text("utilization % for")
    page.get_by_text("Every GPU (links)").click()
    expect(page.locator("[data-signal='sm_active']").first).to_be_visible()
    expect(page.locator("[data-signal='util']").first).to_be_visible()


def test_member_without_telemetry_sees_empty_states(login_as):
    page = login_as("alice")
    page.goto("/dashboards/utilization/")
    expect(page.get_by_test_id("dashboard-empty")).to_contain_text("No telemetry yet")
    page.goto("/dashboards/occupancy/")
    expect(page.get_by_test_id("dashboard-empty")).to_contain_text("No bookings or jobs")


def test_booking_shows_on_occupancy_until_cancelled(login_as):
    now = timezone.now().replace(second=0, microsecond=0)
    start = now - timedelta(minutes=now.minute % 15) + timedelta(hours=1)
    booking = reservation_create(
        team=Team.objects.get(slug="vision"),
        user=User.objects.get(username="alice"),
        gpu_model=GpuModel.objects.get(name="L40S-48GB"),
        count=2,
        start=start,
        end=start + timedelta(hours=2),
        purpose="occupancy check",
    )
    page = login_as("alice")
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto("/dashboards/occupancy/?range=custom&start=" + timezone.now().isoformat()[:16] + "Z")
    # The pickers read wall-clock times in the reader's zone, which the page names.
    zone = ZoneInfo(page.locator("html").get_attribute("data-time-zone"))
    expect(page.locator("#f-zone")).to_contain_text(zone.key)
    end = (start + timedelta(hours=4)).astimezone(zone)
    page.get_by_label("To", exact=True).fill(end.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_test_id("occupancy-count")).to_contain_text("2 bookings")
    gantt = page.locator("[data-figure='gantt']")
    expect(gantt.locator(".main-svg").first).to_be_visible()
    expect(gantt.locator(".legendtext")).to_have_text(["vision bookings"])
    occupancy_url = page.url

    page.goto("/reservations/")
    page.get_by_role("button", name=f"Cancel reservation {booking.pk}").click()
    expect(page.get_by_role("status")).to_contain_text(f"Reservation #{booking.pk} cancelled")
    page.goto(occupancy_url)
    expect(page.get_by_test_id("dashboard-empty")).to_contain_text("No bookings or jobs")
