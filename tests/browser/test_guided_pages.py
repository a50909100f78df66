"""Pages that guide each role: home pages with next steps, navigation without dead ends, the
booking and quota forms, the fleet page after a drain, a job page that follows its job, the
what-if page and changing a member's role."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.fleet.models import GpuModel, Node
from apps.jobs.models import Job
from apps.reservations.choices import ReservationStatus
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.services import reservation_create
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, Team, User

H100 = "H100-SXM-80GB"


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    """Pages only: nothing is sent to node agents."""
    from portal.celery import app

    monkeypatch.setattr(app, "send_task", lambda *args, **kwargs: None)


def test_finance_home_says_what_to_do_and_the_nav_offers_no_booking(login_as):
    page = login_as("fran")
    expect(page.locator("main")).not_to_contain_text("not in any team")
    nav = page.get_by_test_id("nav")
    expect(nav.get_by_role("link", name="Reserve GPUs")).to_have_count(0)
    steps = page.get_by_test_id("home-next")
    expect(steps.get_by_role("link", name="Chargeback and exports")).to_be_visible()
    expect(steps.get_by_role("link", name="Rate cards")).to_be_visible()
    steps.get_by_role("link", name="Budgets").click()
    page.wait_for_url("**/billing/budgets/")


def test_platform_admin_home_links_fleet_quotas_and_what_if(login_as):
    page = login_as("admin")
    expect(page.locator("main")).not_to_contain_text("not in any team")
    steps = page.get_by_test_id("home-next")
    for name in ("Fleet", "Quotas", "what-if", "Audit log"):
        expect(steps.get_by_role("link", name=name, exact=True)).to_be_visible()
    page.get_by_test_id("nav").get_by_role("link", name="What-if").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("What if the quotas were")


def test_team_admin_finds_budgets_and_changes_a_members_role(login_as):
    carol = User.objects.create_user("carol", email="carol@example.com", password="x")
    Membership.objects.create(team=Team.objects.get(slug="nlp"), user=carol, role=TeamRole.MEMBER)
    page = login_as("bob")
    expect(page.get_by_test_id("nav").get_by_role("link", name="Budgets")).to_be_visible()
    page.get_by_test_id("home-next").get_by_role("link", name="Manage the members of").click()
    page.get_by_label("Role of carol", exact=True).select_option("team_admin")
    page.get_by_role("button", name="Change role of carol").click()
    expect(page.get_by_role("status")).to_contain_text("carol is now team admin")
    expect(page.get_by_label("Role of carol", exact=True)).to_have_value("team_admin")
    assert Membership.objects.get(user=carol).role == TeamRole.TEAM_ADMIN


def test_booking_form_starts_on_a_bookable_model_and_keeps_the_token_out_of_the_url(login_as):
    page = login_as("alice")
    page.get_by_test_id("nav").get_by_role("link", name="Reserve GPUs").click()
    # vision has quota for H100 and L40S, none for A100 (the first model by name).
    assert GpuModel.objects.order_by("name").first().name.startswith("A100")
    expect(page.locator("#id_gpu_model")).to_have_value(H100)
    page.fill("#id_count", "3")
    page.get_by_role("button", name="Find free slots").click()
    page.wait_for_url(lambda url: "count=3" in url)
    assert "csrfmiddlewaretoken" not in page.url
    expect(page.get_by_test_id("suggestions")).to_contain_text("3 GPUs")
    # Using a suggestion books it: the token was only left out of the search.
    page.get_by_role("button", name="Use this slot").first.click()
    page.get_by_role("button", name="Book", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Booked")
    assert Reservation.objects.filter(team__slug="vision", count=3).exists()


def test_quota_error_names_its_row_keeps_the_typed_numbers_and_headers_line_up(login_as):
    page = login_as("admin")
    page.goto("/quotas/")
    row = page.locator(f'tr[data-quota="vision/{H100}"]')
    guaranteed = row.get_by_label(f"Guaranteed GPUs for vision {H100}")
    limit = row.get_by_label(f"Limit for vision {H100}")
    table = page.get_by_test_id("quota-table")
    for header, field in (("Guaranteed", guaranteed), ("Limit", limit)):
        head = table.locator("th", has_text=header).first.bounding_box()
        box = field.bounding_box()
        assert head["x"] - 1 <= box["x"] < head["x"] + head["width"], (header, head, box)
    guaranteed.fill("7")
    limit.fill("3")
    row.get_by_role("button", name=f"Save quota of vision {H100}").click()
    error = page.get_by_test_id("quota-error")
    expect(error).to_contain_text(f"vision / {H100}")
    expect(error).to_contain_text("The limit (3) must be at least guaranteed (7).")
    expect(row.get_by_label(f"Guaranteed GPUs for vision {H100}")).to_have_value("7")
    expect(row.get_by_label(f"Limit for vision {H100}")).to_have_value("3")


def _running_booking(team_slug: str, username: str, count: int, node: Node) -> Reservation:
    start = (timezone.now() + timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    reservation = reservation_create(
        team=Team.objects.get(slug=team_slug), user=User.objects.get(username=username),
        gpu_model=GpuModel.objects.get(name=H100), count=count, same_node=True,
        start=start, end=start + timedelta(hours=6),
    )  # fmt: skip
    started = timezone.now() - timedelta(hours=1)
    Reservation.objects.filter(pk=reservation.pk).update(
        start=started, status=ReservationStatus.ACTIVE
    )
    ReservationGpu.objects.filter(reservation=reservation).update(start=started)
    assert reservation.holdings.first().gpu.node == node
    return reservation


def test_draining_a_node_shows_one_summary_and_the_node_out_of_service(login_as):
    node = Node.objects.get(hostname="gpu-h100-01")
    _running_booking("vision", "alice", 3, node)
    _running_booking("nlp", "bob", 4, node)
    page = login_as("admin")
    page.goto("/fleet/")
    page.on("dialog", lambda dialog: dialog.accept())
    card = page.locator(f'section[data-node="{node.hostname}"]')
    expect(card).to_contain_text("7 open GPU bookings")
    card.get_by_label(f"Reason for draining {node.hostname}").fill("firmware")
    card.get_by_role("button", name=f"Drain node {node.hostname}").click()
    banners = page.locator(".messages .message.info")
    expect(banners).to_have_count(1)
    expect(banners).to_contain_text("7 booked GPUs of 2 reservations moved to other GPUs")
    expect(banners).to_contain_text("gpu-h100-02")
    card = page.locator(f'section[data-node="{node.hostname}"]')
    expect(card.get_by_test_id("node-status")).to_have_text("Drained")
    expect(card).to_contain_text("0 open GPU bookings")
    expect(card.get_by_role("button", name="Drain GPU")).to_have_count(0)
    expect(card.get_by_test_id("gpu-status").filter(has_text="Active")).to_have_count(0)
    expect(card.get_by_test_id("gpu-status").first).to_have_text("Out of service (node drained)")


def test_job_page_follows_the_job_without_a_reload(login_as, settings):
    settings.JOBS_PAGE_POLL_SECONDS = 0.3
    from apps.jobs import services

    alice = User.objects.get(username="alice")
    job = services.job_submit(
        actor=alice, team=Team.objects.get(slug="vision"), argv=["true"], gpu_count=1,
        max_runtime_seconds=600,
    )  # fmt: skip
    page = login_as("alice")
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("estimated-start")).to_have_text("No estimated start yet.")
    page.evaluate("window.__stillTheSamePage = true")
    start = timezone.now() + timedelta(hours=2)
    Job.objects.filter(pk=job.pk).update(
        pending_message="Free H100 GPUs are booked by other teams before this job would end.",
        estimated_start=start,
    )
    expect(page.get_by_test_id("pending-message")).to_contain_text("booked by other teams")
    expect(page.get_by_test_id("estimated-start")).to_contain_text("Estimated start:")
    assert page.evaluate("window.__stillTheSamePage") is True
    # A status change reloads the page for the new state.
    Job.objects.filter(pk=job.pk).update(status="cancelled", finished_at=timezone.now())
    expect(page.get_by_test_id("job-status")).to_have_text("Cancelled")
    assert page.evaluate("window.__stillTheSamePage") is None


@pytest.fixture
def job_history():
    """vision and nlp each ran eight 4-GPU H100 jobs of 2 h, all submitted an hour ago."""
    from apps.billing.models import RateCard

    h100 = GpuModel.objects.get(name=H100)
    if not RateCard.objects.filter(gpu_model=h100).exists():
        RateCard.objects.create(
            gpu_model=h100, price_per_gpu_hour=Decimal("2.00"),
            effective_from=timezone.now() - timedelta(days=60),
        )  # fmt: skip
    submitted = timezone.now() - timedelta(hours=1)
    for slug, username in (("vision", "alice"), ("nlp", "bob")):
        for _ in range(8):
            job = Job.objects.create(
                team=Team.objects.get(slug=slug), submitted_by=User.objects.get(username=username),
                name="train", argv=["train"], gpu_model=h100, gpu_count=4,
                max_runtime_seconds=7200, status="succeeded",
            )  # fmt: skip
            Job.objects.filter(pk=job.pk).update(submitted_at=submitted)


@pytest.fixture
def replay_worker(monkeypatch):
    """A Celery worker for the what-if runs the page starts (the page only answers with the
    run; the worker replays it). Sending is on again for these tests: they submit no job."""
    from celery.contrib.testing.worker import start_worker

    from portal.celery import app

    monkeypatch.setattr(app, "send_task", type(app).send_task.__get__(app))
    app.control.purge()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        yield


def test_what_if_draws_the_waits_and_keeps_the_proposal(login_as, job_history, replay_worker):
    page = login_as("admin")
    page.goto("/jobs/what-if/")
    row = (
        page.get_by_test_id("whatif-quotas").locator("tr", has_text="vision").filter(has_text=H100)
    )
    row.get_by_label(f"Guaranteed for vision {H100}").fill("6")
    page.get_by_role("button", name="Replay").click()
    page.wait_for_url("**/jobs/what-if/?run=*")
    # The page follows the run the worker replays, then shows its result.
    expect(page.get_by_test_id("whatif-result")).to_be_visible()
    expect(page.get_by_test_id("whatif-fairness")).to_contain_text("Jain")
    expect(page.get_by_test_id("whatif-progress")).to_have_count(0)
    expect(row.get_by_label(f"Guaranteed for vision {H100}")).to_have_value("6")
    chart = page.locator('[data-figure="wait"]')
    expect(chart.locator(".main-svg").first).to_be_visible()
    top = page.evaluate(
        "() => document.querySelector('[data-figure=wait]')._fullLayout.yaxis.range[1]"
    )
    heights = page.evaluate(
        "() => Array.from(document.querySelectorAll('[data-figure=wait] .bars path'))"
        ".map(p => p.getBBox().height)"
    )
    assert top > 1 and max(heights) > 0, (top, heights)


def test_what_if_with_too_little_history_says_so(login_as, replay_worker):
    Job.objects.all().delete()
    for _ in range(2):
        job = Job.objects.create(
            team=Team.objects.get(slug="vision"), submitted_by=User.objects.get(username="alice"),
            argv=["x"], gpu_model=GpuModel.objects.get(name=H100), gpu_count=1,
            max_runtime_seconds=600, status="succeeded",
        )  # fmt: skip
        Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(hours=2))
    page = login_as("admin")
    page.goto("/jobs/what-if/")
    page.get_by_role("button", name="Replay").click()
    page.wait_for_url("**/jobs/what-if/?run=*")
    expect(
        page.get_by_test_id("whatif-empty").or_(page.get_by_test_id("whatif-too-little"))
    ).to_be_visible()
    expect(page.locator('[data-figure="wait"]')).to_have_count(0)
    expect(page.get_by_test_id("whatif-result")).to_have_count(0)


def test_what_if_shows_the_progress_of_a_run_it_is_waiting_for(login_as, job_history):
    """No worker here: the run stays queued, the page shows where it is and moves the bar when
    the run moves, without reloading, and shows the result once the run is done."""
    from apps.jobs.choices import WhatIfStatus
    from apps.jobs.models import WhatIfRun
    from apps.jobs.whatif import whatif_run_execute

    page = login_as("admin")
    page.goto("/jobs/what-if/")
    page.get_by_role("button", name="Replay").click()
    page.wait_for_url("**/jobs/what-if/?run=*")
    expect(page.get_by_test_id("whatif-progress-percent")).to_have_text("0")
    page.evaluate("window.__stillTheSamePage = true")
    run = WhatIfRun.objects.get()
    WhatIfRun.objects.filter(pk=run.pk).update(status=WhatIfStatus.RUNNING, progress=50)
    expect(page.get_by_test_id("whatif-progress-percent")).to_have_text("50")
    assert page.evaluate("window.__stillTheSamePage") is True
    WhatIfRun.objects.filter(pk=run.pk).update(status=WhatIfStatus.QUEUED, progress=0)
    whatif_run_execute(run_id=run.pk)
    expect(page.get_by_test_id("whatif-result")).to_be_visible()
    assert page.evaluate("window.__stillTheSamePage") is None


def test_what_if_tells_the_admin_which_teams_a_proposal_leaves_better_or_worse_off(
    login_as, job_history, replay_worker
):
    page = login_as("admin")
    page.goto("/jobs/what-if/")
    # vision may take the whole H100 fleet; nlp keeps only 4 GPUs.
    page.get_by_label(f"Guaranteed for vision {H100}").fill("8")
    page.get_by_label(f"Limit for vision {H100}").fill("16")
    page.get_by_label(f"Guaranteed for nlp {H100}").fill("4")
    page.get_by_label(f"Limit for nlp {H100}").fill("4")
    page.get_by_role("button", name="Replay").click()
    page.wait_for_url("**/jobs/what-if/?run=*")
    table = page.get_by_role("table", name="Who the proposal leaves better or worse off")
    expect(table).to_be_visible()
    expect(page.get_by_test_id("whatif-verdict")).to_contain_text("Worse off: nlp.")
    expect(page.get_by_test_id("whatif-verdict")).to_contain_text("Better off: vision.")
    rows = table.locator("tbody tr")
    expect(rows.first.locator("td").nth(0)).to_have_text("nlp")  # the team it hurts first
    nlp = table.locator('tr[data-team="nlp"] td')
    expect(nlp.nth(1)).to_have_text("Worse off")
    vision = table.locator('tr[data-team="vision"] td')
    expect(vision.nth(1)).to_have_text("Better off")
    # vision's average JCT falls, nlp's grows (hours, now then proposed).
    vision_now, vision_then = (float(vision.nth(k).inner_text()) for k in (2, 3))
    nlp_now, nlp_then = (float(nlp.nth(k).inner_text()) for k in (2, 3))
    assert vision_then < vision_now and nlp_then > nlp_now
