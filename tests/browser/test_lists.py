"""List pages as a person uses them: a click on a column header changes the order (and a second
click reverses it), a filter narrows the rows and keeps the sort, a bad filter value explains
itself; another team's rows never appear. Also the layout of the filter bar and the main
navigation at a laptop's width."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.audit.models import AuditEvent
from apps.audit.services import audit_record
from apps.fleet.models import GpuModel
from apps.jobs.choices import JobStatus
from apps.teams.models import Team, User
from tests.factories import JobFactory


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    from portal.celery import app

    monkeypatch.setattr(app, "send_task", lambda *args, **kwargs: None)


def _names(page) -> list[str]:
    table = page.get_by_test_id("job-table")
    return [cell.inner_text() for cell in table.locator("tbody tr td:nth-child(2)").all()]


@pytest.fixture
def jobs():
    vision, nlp = Team.objects.get(slug="vision"), Team.objects.get(slug="nlp")
    alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
    model = GpuModel.objects.order_by("name").first()
    for name, status in [("mango", JobStatus.QUEUED), ("apple", JobStatus.RUNNING),
                         ("zucchini", JobStatus.QUEUED)]:  # fmt: skip
        JobFactory(team=vision, submitted_by=alice, name=name, status=status, gpu_model=model)
    JobFactory(team=nlp, submitted_by=bob, name="aaa-nlp-only", gpu_model=model)


def test_job_list_sorts_by_a_header_click_and_filters(login_as, jobs):
    page = login_as("alice")
    page.goto("/jobs/")
    assert "aaa-nlp-only" not in page.get_by_test_id("job-table").inner_text()
    before = _names(page)
    header = page.get_by_test_id("job-table").get_by_role("link", name="Name")
    header.click()
    page.wait_for_url(re.compile(r"sort=name"))
    ascending = _names(page)
    assert ascending == sorted(before) and ascending != before
    expect(page.locator("th[aria-sort='ascending']")).to_contain_text("Name")
    page.get_by_test_id("job-table").get_by_role("link", name="Name").click()
    page.wait_for_url(re.compile(r"sort=-name"))
    assert _names(page) == ascending[::-1]
    assert "aaa-nlp-only" not in _names(page)

    # A filter narrows the rows and keeps the order.
    filters = page.get_by_test_id("job-filters")
    filters.get_by_label("Status").select_option("queued")
    filters.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"status=queued"))
    assert _names(page) == ["zucchini", "mango"]
    assert "sort=-name" in page.url

    # Another team's slug is refused, with a message, and shows nothing.
    page.goto("/jobs/?team=nlp")
    expect(page.get_by_test_id("filter-problems")).to_contain_text("Team: Select a valid choice")
    assert _names(page) == ["No jobs here yet. Submit a job."] or _names(page) == []


def test_only_my_jobs_has_room_before_the_button(login_as, jobs):
    page = login_as("alice")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto("/jobs/")
    filters = page.get_by_test_id("job-filters")
    label = filters.get_by_text("Only my jobs").bounding_box()
    button = filters.get_by_role("button", name="Filter").bounding_box()
    same_line = abs(label["y"] - button["y"]) < button["height"]
    assert not same_line or button["x"] - (label["x"] + label["width"]) >= 8
    # The class column shows the whole short name, not a cut-off phrase.
    expect(page.get_by_test_id("job-table").locator("tbody tr").first).to_contain_text(
        re.compile(r"Guaranteed|Over quota|Preemptible")
    )


def test_audit_log_searches_and_limits_dates(login_as):
    admin = User.objects.get(username="admin")
    vision = Team.objects.get(slug="vision")
    audit_record(actor=admin, action="team.change", target=vision, reason="needle in the log")
    old = audit_record(actor=admin, action="team.change", target=vision, reason="old needle")
    AuditEvent.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timezone.timedelta(days=40)
    )
    page = login_as("admin")
    page.goto("/audit/")
    filters = page.get_by_test_id("audit-filters")
    filters.get_by_label("Search").fill("needle")
    filters.get_by_role("button", name="Filter").click()
    table = page.get_by_test_id("audit-table")
    expect(table.locator("tbody tr[data-event]")).to_have_count(2)
    since = (timezone.now() - timezone.timedelta(days=7)).date().isoformat()
    page.goto(f"/audit/?q=needle&since={since}")
    expect(table.locator("tbody tr[data-event]")).to_have_count(1)
    expect(table).to_contain_text("needle in the log")
    # Sorting by time, oldest first, by a header click.
    page.goto("/audit/?q=needle")
    table.get_by_role("link", name="Time").click()
    page.wait_for_url(re.compile(r"sort=created_at"))
    expect(table.locator("tbody tr[data-event]").first).to_contain_text("old needle")
    page.goto("/audit/?since=not-a-date")
    expect(page.get_by_test_id("filter-problems")).to_contain_text("From: Enter a valid date.")


def test_platform_admin_navigation_fits_one_line_at_1400_px(login_as):
    page = login_as("admin")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto("/")
    tops = {round(item.bounding_box()["y"]) for item in page.locator(".nav > li").all()}
    assert len(tops) == 1, f"the navigation wraps onto {len(tops)} lines"
    menu = page.locator(".user-menu").bounding_box()
    nav = page.get_by_test_id("nav").bounding_box()
    assert abs(menu["y"] - nav["y"]) < nav["height"], "the user menu wrapped below the links"


def test_fleet_gpus_sort_by_a_header_click_and_filter_by_model(login_as):
    page = login_as("alice")
    page.goto("/fleet/")
    card = page.locator("section.card.node").first
    first_rows = card.locator("tbody tr")
    before = [row.get_attribute("id") for row in first_rows.all()]
    card.get_by_role("link", name="GPU", exact=True).click()
    page.wait_for_url(re.compile(r"sort=index"))
    card.get_by_role("link", name="GPU", exact=True).click()
    page.wait_for_url(re.compile(r"sort=-index"))
    after = [
        row.get_attribute("id")
        for row in page.locator("section.card.node").first.locator("tbody tr").all()
    ]
    assert after == before[::-1] and len(after) > 1

    filters = page.get_by_test_id("fleet-filters")
    filters.get_by_label("GPU model").select_option("L40S-48GB")
    filters.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"model=L40S-48GB"))
    models = page.locator("section.card.node tbody tr td:nth-child(2)").all_inner_texts()
    assert models and set(models) == {"L40S-48GB"}
    assert "sort=-index" in page.url


def test_the_organisation_units_open_from_the_teams_page(login_as):
    page = login_as("admin")
    page.goto("/teams/")
    page.get_by_role("link", name="Organisation units").click()
    expect(page.get_by_role("heading", name="Organisation units")).to_be_visible()
    expect(page.get_by_test_id("nav")).not_to_contain_text("Units")
