"""The live queue page as a member sees it: each team's GPUs now, waiting jobs in order with
why they wait, another team's job without its name, and a new job appearing without a reload."""

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from apps.fleet.models import GpuModel
from apps.jobs import dispatch
from apps.teams.models import Team
from tests.factories import JobFactory


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    from apps.jobs import messaging
    from portal.celery import app

    monkeypatch.setattr(app, "send_task", lambda *args, **kwargs: None)
    monkeypatch.setattr(messaging, "send_agent_task", lambda *args, **kwargs: None)


def _job(team: str, user: str, name: str, count: int):
    return JobFactory(
        team=Team.objects.get(slug=team),
        submitted_by=get_user_model().objects.get(username=user),
        name=name,
        gpu_model=GpuModel.objects.get(name="H100-SXM-80GB"),
        gpu_count=count,
    )


def test_queue_page_shows_order_reasons_teams_and_refreshes_itself(login_as, settings):
    settings.JOBS_QUEUE_REFRESH_SECONDS = 1
    # vision may hold 8 H100: the first 8-GPU job runs, the second waits for the limit.
    running = _job("vision", "alice", "resnet-big", 8)
    waiting = _job("vision", "alice", "resnet-next", 8)
    hidden = _job("nlp", "bob", "nlp-private-run", 16)
    dispatch.schedule_cycle()

    page = login_as("alice")
    page.get_by_test_id("nav").get_by_role("link", name="Queue", exact=True).click()
    expect(page.get_by_role("heading", name="Queue", exact=True)).to_be_visible()
    vision = page.locator(
        '[data-testid=queue-teams] tr[data-team=vision][data-model="H100-SXM-80GB"]'
    )
    expect(vision.locator("[data-col=used]")).to_have_text("8")
    expect(vision.locator("[data-col=borrowed]")).to_have_text("4")

    h100 = page.locator('[data-testid=queue-model][data-model="H100-SXM-80GB"]')
    rows = h100.locator("tbody tr")
    expect(rows).to_have_count(2)
    # Per-user fair share: alice's running job pushes her next turn back, so nlp's job,
    # submitted later, comes first.
    expect(rows.nth(0)).to_have_attribute("data-job", str(hidden.pk))
    expect(rows.nth(0)).to_contain_text("another team's job")
    expect(rows.nth(1)).to_have_attribute("data-job", str(waiting.pk))
    expect(rows.nth(1).locator("[data-col=reason]")).to_contain_text("Team at its quota limit")
    expect(h100).not_to_contain_text("nlp-private-run")
    assert running.pk not in [int(v) for v in rows.evaluate_all("r => r.map(x => x.dataset.job)")]

    # A job submitted while the page is open shows up by itself, third in line.
    later = _job("vision", "alice", "resnet-third", 2)
    expect(rows).to_have_count(3, timeout=8000)
    expect(rows.nth(2)).to_have_attribute("data-job", str(later.pk))
    expect(rows.nth(2).locator("[data-col=position]")).to_have_text("3")
