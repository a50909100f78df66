"""What the portal answers where it used to answer wrongly: the idle dashboard's state of a
GPU nobody holds, the booking form's errors and suggestions, a moved or stranded booking, and
a job larger than its team's guarantee."""

from datetime import timedelta

from django.utils import timezone
from playwright.sync_api import expect

from apps.fleet.models import Gpu
from apps.telemetry.models import GpuMinuteRollup


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
