"""Submitting a job through the form, its detail page (why pending), cancelling it with a
confirmation, and the queue page's filters."""

import pytest
from playwright.sync_api import expect

from apps.jobs.models import Job


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    """The page flow only; dispatch to agents is covered by tests/jobs/test_end_to_end.py."""
    from portal.celery import app

    monkeypatch.setattr(app, "send_task", lambda *args, **kwargs: None)


def test_submit_see_pending_and_cancel(login_as):
    page = login_as("alice")
    page.get_by_test_id("nav").get_by_role("link", name="Jobs", exact=True).click()
    expect(page.get_by_test_id("job-table")).to_contain_text("No jobs here yet")
    page.get_by_role("link", name="Submit a job").first.click()
    page.fill("#id_name", "ablation")
    page.fill("#id_argv", "python\ntrain.py\n--config=a b.yaml")
    page.fill("#id_env", "SEED=7")
    page.select_option("#id_gpu_model", "H100-SXM-80GB")
    page.fill("#id_gpu_count", "2")
    page.fill("#id_max_runtime_minutes", "30")
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_test_id("job-status")).to_have_text("Queued")
    expect(page.get_by_test_id("pending")).to_contain_text("Why is it pending?")
    job = Job.objects.get(name="ablation")
    assert job.argv == ["python", "train.py", "--config=a b.yaml"] and job.env == {"SEED": "7"}

    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
    page.get_by_role("button", name="Cancel job").click()
    expect(page.get_by_test_id("job-status")).to_have_text("Cancelled")
    assert dialogs and "Cancel job" in dialogs[0]

    page.goto("/jobs/?status=cancelled")
    expect(page.locator(f'tr[data-job="{job.pk}"]')).to_be_visible()
    page.goto("/jobs/?status=running")
    expect(page.get_by_test_id("job-table")).to_contain_text("No jobs here yet")


def test_bad_input_is_shown_next_to_the_field(login_as):
    page = login_as("alice")
    page.goto("/jobs/submit/")
    page.fill("#id_argv", "python")
    page.fill("#id_env", "not-a-name=1")
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#id_env-error")).to_contain_text("not a valid variable name")
    assert not Job.objects.exists()
