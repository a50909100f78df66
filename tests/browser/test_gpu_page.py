"""From the fleet page to one GPU's page: its activity chart drawn with plotly, the 7-day
window, who held it and its health events."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from apps.fleet import services as fleet_services
from apps.fleet.models import Gpu
from apps.teams.models import Team
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup
from tests.factories import make_booking


def test_gpu_page_from_the_fleet(login_as):
    gpu = Gpu.objects.get(node__hostname="gpu-h100-01", index=3)
    now = timezone.now().replace(second=0, microsecond=0)
    GpuMinuteRollup.objects.bulk_create(
        GpuMinuteRollup(gpu=gpu, bucket=now - timedelta(minutes=i + 1), samples=4,
                        util_avg=30 + i % 50, busy_seconds=30, mem_used_avg_mib=4096.0)
        for i in range(120)
    )  # fmt: skip
    GpuHourRollup.objects.bulk_create(
        GpuHourRollup(gpu=gpu, bucket=now - timedelta(hours=i + 1), samples=240, util_avg=55.0,
                      busy_seconds=1800)
        for i in range(48)
    )  # fmt: skip
    alice = get_user_model().objects.get(username="alice")
    make_booking(Team.objects.get(slug="vision"), alice, [gpu], now - timedelta(hours=3),
                 now - timedelta(hours=1), purpose="detector eval")  # fmt: skip
    fleet_services.gpu_set_health(gpu=gpu, health="degraded", reason="XID 79 reported by NVML")

    page = login_as("alice")
    page.get_by_test_id("nav").get_by_role("link", name="Fleet", exact=True).click()
    page.get_by_role("link", name="History of GPU 3 on gpu-h100-01").click()
    expect(page.get_by_role("heading", name="GPU gpu-h100-01/gpu3")).to_be_visible()
    expect(page.locator("[data-figure=gpu-activity] .main-svg").first).to_be_visible(timeout=15000)
    expect(page.get_by_test_id("gpu-holders")).to_contain_text("detector eval")
    expect(page.get_by_test_id("gpu-events")).to_contain_text("XID 79 reported by NVML")
    expect(page.get_by_test_id("gpu-events")).to_contain_text("healthy → degraded")

    page.get_by_role("link", name="Last 7d").click()
    expect(page.get_by_test_id("gpu-ranges").locator("[aria-current=page]")).to_have_text("Last 7d")
    expect(page.locator("[data-figure=gpu-activity] .main-svg").first).to_be_visible(timeout=15000)
    points = page.evaluate(
        "() => document.querySelector('[data-figure=gpu-activity]').data[0].x.length"
    )
    assert points == 48
