"""/efficiency/ in a real browser: a team admin finds the job that held idle GPUs with its
suggestion and saving, narrows the list with the filters, downloads the CSV and switches the
team's weekly email off; a member of another team sees the empty state."""

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.billing.models import RateCard
from apps.efficiency.models import DigestSetting
from apps.fleet.models import Gpu, GpuModel
from apps.jobs.choices import JobStatus
from apps.jobs.models import Job, JobAllocation
from apps.teams.models import Team, User
from apps.telemetry.models import GpuMinuteRollup


@pytest.fixture
def idle_job(demo_data):
    """bob's (nlp) job two days ago: 4 H100 for 2 h, only GPU 0 busy."""
    h100 = GpuModel.objects.get(name="H100-SXM-80GB")
    RateCard.objects.filter(gpu_model=h100).delete()
    RateCard.objects.create(
        gpu_model=h100,
        price_per_gpu_hour=Decimal("2.50"),
        effective_from=timezone.now() - timedelta(days=400),
    )
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
    gpus = list(Gpu.objects.filter(node__hostname="gpu-h100-01").order_by("index")[:4])
    job = Job.objects.create(
        team=Team.objects.get(slug="nlp"),
        submitted_by=User.objects.get(username="bob"),
        name="sweep",
        argv=["python", "sweep.py"],
        gpu_model=h100,
        gpu_count=4,
        max_runtime_seconds=7200,
        status=JobStatus.SUCCEEDED,
        started_at=start,
        finished_at=start + timedelta(hours=2),
    )
    JobAllocation.objects.bulk_create(
        JobAllocation(job=job, gpu=g, start=start, end=start + timedelta(hours=2)) for g in gpus
    )
    GpuMinuteRollup.objects.bulk_create(
        GpuMinuteRollup(
            gpu=g,
            bucket=start + timedelta(minutes=m),
            samples=4,
            util_avg=90.0 if i == 0 else 0.0,
            util_max=90 if i == 0 else 0,
            mem_used_avg_mib=70000,
            mem_used_max_mib=70000,
            busy_seconds=60.0 if i == 0 else 0.0,
        )
        for i, g in enumerate(gpus)
        for m in range(120)
    )
    return job


def test_team_admin_reads_filters_downloads_and_opts_out(login_as, idle_job):
    page = login_as("bob")
    page.get_by_role("link", name="Right-sizing").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Right-sizing advice")
    row = page.locator(f"[data-item='job-{idle_job.pk}']")
    expect(row).to_contain_text("GPUs held but not used")
    expect(row).to_contain_text("3 of 4 GPUs stayed idle")
    expect(row).to_contain_text("request 1 GPU instead of 4")
    # 3 idle GPUs x 2 h x 2.50 = 15.00.
    expect(row).to_contain_text("15.00 USD")
    expect(page.get_by_test_id("advice-total")).to_have_text("15.00 USD")

    page.get_by_label("Finding").select_option("memory")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_test_id("advice-empty")).to_be_visible()
    page.get_by_label("Finding").select_option("")
    page.get_by_label("Team", exact=True).select_option("nlp")
    page.get_by_role("button", name="Show").click()
    expect(page.locator(f"[data-item='job-{idle_job.pk}']")).to_be_visible()

    with page.expect_download() as download:
        page.get_by_test_id("advice-csv").click()
    text = Path(download.value.path()).read_text()
    assert "idle_gpus" in text and f"job,{idle_job.pk},nlp,bob" in text and "15.00" in text

    page.get_by_role("button", name="Turn the weekly email of nlp off").click()
    expect(page.get_by_role("status")).to_contain_text("weekly right-sizing email of nlp is off")
    assert DigestSetting.objects.get(team__slug="nlp").weekly_digest is False
    expect(page.locator("[data-digest='nlp']")).to_contain_text("off")


def test_job_page_shows_idle_gpus_and_a_member_elsewhere_sees_nothing(login_as, idle_job):
    page = login_as("bob")
    page.goto(f"/jobs/{idle_job.pk}/")
    expect(page.get_by_test_id("idle-gpus")).to_contain_text("3 of 4")
    page.context.clear_cookies()
    page = login_as("alice")
    page.goto("/efficiency/")
    expect(page.get_by_test_id("advice-empty")).to_be_visible()
    expect(page.get_by_test_id("advice-total")).to_have_text("0.00 USD")
