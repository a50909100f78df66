"""What the portal answers where it used to answer wrongly: the idle dashboard's state of a
GPU nobody holds and of a powered-down node's GPUs, the booking form's errors and suggestions,
a moved or stranded booking, and a job larger than its team's guarantee."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.fleet.choices import PowerState
from apps.fleet.models import Gpu, Node
from apps.teams.models import Quota
from apps.telemetry.models import GpuMinuteRollup
from tests.browser.conftest import DEFAULT_TIMEOUT_MS, login

H100 = "H100-SXM-80GB"
NEW_YORK = "America/New_York"


@pytest.fixture
def new_york_page(browser, live_server, demo_data, browser_errors):
    """A page whose browser lives in New York (UTC-5 in winter, UTC-4 in summer)."""
    context = browser.new_context(base_url=live_server.url, timezone_id=NEW_YORK)
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = context.new_page()
    page.on("console", browser_errors.on_console)
    page.on("pageerror", browser_errors.on_pageerror)
    yield page
    context.close()
    assert not browser_errors.unexpected(), browser_errors.unexpected()


def test_idle_dashboard_shows_a_gpu_nobody_holds_as_unallocated(login_as):
    gpu = Gpu.objects.filter(mig_parent__isnull=True).order_by("node__hostname", "index").first()
    now = timezone.now().replace(second=0, microsecond=0)
    # Load on a GPU that no booking or job holds (a stray process): not "Busy".
    GpuMinuteRollup.objects.bulk_create(
        GpuMinuteRollup(
            gpu=gpu,
            bucket=now - timedelta(minutes=m),
            samples=4,
            util_avg=90,
            util_max=95,
            busy_seconds=60,
        )
        for m in range(1, 4)
    )
    page = login_as("admin")
    page.goto("/dashboards/idle/?range=24h")
    page.get_by_text("Every GPU (links)").click()
    cell = page.locator(f"li[data-gpu='{gpu.node.hostname}/gpu{gpu.index}']")
    expect(cell.locator("[data-state]")).to_have_text("Unallocated (free)")
    counts = page.get_by_test_id("state-counts")
    expect(counts).to_contain_text("Busy: 0")
    expect(counts).to_contain_text("Unallocated (free):")


def test_idle_dashboard_shows_a_powered_down_node_as_powered_down(login_as):
    gpu = Gpu.objects.filter(mig_parent__isnull=True).order_by("node__hostname", "index").first()
    Node.objects.filter(pk=gpu.node_id).update(power_state=PowerState.OFF)
    powered_down = Gpu.objects.filter(node=gpu.node_id, mig_parent__isnull=True).count()
    page = login_as("admin")
    page.goto("/dashboards/idle/?range=24h")
    page.get_by_text("Every GPU (links)").click()
    cell = page.locator(f"li[data-gpu='{gpu.node.hostname}/gpu{gpu.index}']")
    expect(cell.locator("[data-state]")).to_have_text("Powered down (saving energy)")
    expect(cell.locator("[data-power]")).to_have_text("· node off")
    counts = page.get_by_test_id("state-counts")
    expect(counts).to_contain_text(f"Powered down (saving energy): {powered_down}")


def _fill_booking(page, *, start: str, hours: str) -> None:
    page.get_by_label("Team").select_option("vision")
    page.get_by_label("GPU model").select_option(H100)
    page.get_by_label("GPUs", exact=True).fill("2")
    page.get_by_label("Start").fill(start)
    page.get_by_label("Duration (hours)").fill(hours)


def test_booking_form_shows_only_the_real_error_of_an_off_grid_start(new_york_page):
    page = new_york_page
    login(page, "alice")
    page.goto("/reservations/new/")
    day = (timezone.now() + timedelta(days=2)).date()
    _fill_booking(page, start=f"{day.isoformat()}T10:07", hours="2")
    page.get_by_role("button", name="Book", exact=True).click()
    expect(page.locator("#id_start-error")).to_have_text("The start must be on the 15-minute grid.")
    expect(page.locator("#booking-form .error:visible")).to_have_count(1)
    expect(page.get_by_text("multiple of 15 minutes")).to_have_count(0)


def test_find_free_slots_starts_at_the_local_day_and_time_typed(new_york_page):
    """20:00 in New York is 01:00 UTC the next day: the first suggestion is that moment (the
    fleet is empty), not a slot a day early, and the table counts what vision may book."""
    page = new_york_page
    login(page, "alice")
    page.goto("/reservations/new/")
    day = (timezone.now() + timedelta(days=2)).date()
    _fill_booking(page, start=f"{day.isoformat()}T20:00", hours="2")
    page.get_by_role("button", name="Find free slots").click()
    page.wait_for_url(re.compile(r"/reservations/new/\?"))
    first = page.get_by_test_id("suggestions").locator("li").first
    suggested = datetime.fromisoformat(
        first.get_by_role("button", name="Use this slot").get_attribute("data-fill-start")
    )
    offset = page.evaluate(f"new Date('{day.isoformat()}T20:00').getTimezoneOffset()")
    wanted = datetime(day.year, day.month, day.day, 20, tzinfo=UTC) + timedelta(minutes=offset)
    assert suggested == wanted, f"suggested {suggested}, asked for {wanted}"
    # "Use this slot" puts back the day and time typed, in New York time.
    first.get_by_role("button", name="Use this slot").click()
    expect(page.get_by_label("Start")).to_have_value(f"{day.isoformat()}T20:00")
    limit = Quota.objects.get(team__slug="vision", gpu_model__name=H100).limit
    fleet = Gpu.objects.schedulable().filter(model__name=H100, mig_parent__isnull=True).count()
    assert limit < fleet, "the demo's vision may book fewer H100s than the fleet has"
    cells = page.get_by_test_id("timeline").locator("tbody td:not(.past)")
    counts = {int(t) for t in cells.all_inner_texts()}
    assert max(counts) == limit and fleet not in counts


def test_guaranteed_job_above_the_guarantee_is_refused_on_the_form(login_as, monkeypatch):
    from apps.jobs.models import Job
    from portal.celery import app

    monkeypatch.setattr(app, "send_task", lambda *args, **kwargs: None)
    guarantee = Quota.objects.get(team__slug="vision", gpu_model__name=H100).guaranteed
    page = login_as("alice")
    page.goto("/jobs/submit/")
    page.fill("#id_argv", "python\ntrain.py")
    page.select_option("#id_gpu_model", H100)
    page.fill("#id_gpu_count", str(guarantee + 2))
    # The form starts in the Guaranteed class for a team with a guarantee.
    expect(page.locator("#id_priority_class")).to_have_value("guaranteed")
    page.get_by_role("button", name="Submit").click()
    error = page.locator("#id_priority_class-error")
    expect(error).to_contain_text(f"guaranteed {guarantee} {H100} GPUs")
    expect(error).to_contain_text("Choose Over quota")
    assert not Job.objects.exists()
    # The fix the message names works.
    page.select_option("#id_priority_class", "over_quota")
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_test_id("job-status")).to_have_text("Queued")
    assert Job.objects.get().priority_class == "over_quota"


def _book_h100(slug: str, username: str, count: int, start, *, same_node: bool = False):
    from apps.fleet.models import GpuModel
    from apps.reservations.services import reservation_create
    from apps.teams.models import Team, User

    return reservation_create(
        team=Team.objects.get(slug=slug),
        user=User.objects.get(username=username),
        gpu_model=GpuModel.objects.get(name=H100),
        count=count,
        start=start,
        end=start + timedelta(hours=2),
        same_node=same_node,
    )


def _tomorrow_9():
    return (timezone.now() + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)


def test_booking_page_says_a_gpu_moved_and_why(login_as):
    from apps.fleet.services import gpu_change_state
    from apps.teams.models import User

    booking = _book_h100("vision", "alice", 2, _tomorrow_9())
    victim = booking.holdings.first().gpu
    gpu_change_state(gpu=victim, operation="drain", actor=User.objects.get(username="admin"))
    page = login_as("alice")
    page.goto(f"/reservations/{booking.pk}/")
    notice = page.get_by_test_id("moved-gpus")
    expect(notice).to_contain_text(re.compile(rf"Moved from {victim} to \S+/gpu\d+ on "))
    expect(notice).to_contain_text(f"because {victim} was drained.")
    expect(page.get_by_test_id("stranded-gpus")).to_have_count(0)


def test_booking_page_warns_of_a_gpu_that_left_with_nowhere_to_go(login_as):
    from apps.fleet.models import Node
    from apps.fleet.services import node_change_state
    from apps.teams.models import User

    start = _tomorrow_9()
    mine = _book_h100("vision", "alice", 8, start, same_node=True)
    _book_h100("nlp", "bob", 8, start)  # every other H100 is taken
    node = Node.objects.get(pk=mine.holdings.first().gpu.node_id)
    node_change_state(node=node, operation="drain", actor=User.objects.get(username="admin"))
    page = login_as("alice")
    page.goto(f"/reservations/{mine.pk}/")
    expect(page.get_by_test_id("reservation-status")).to_have_text("Scheduled")
    alert = page.get_by_test_id("stranded-gpus")
    expect(alert).to_be_visible()
    expect(alert).to_contain_text(f"because node {node.hostname} was drained, and no other")
    expect(alert).to_contain_text("This booking has no GPU left in service")
