"""The idle dashboard's "GPUs now": a GPU nobody holds is unallocated (free) whatever its
telemetry says, and a GPU a running job holds outside any booking belongs to the job's team."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import Gpu
from apps.jobs.choices import JobStatus
from apps.jobs.models import JobAllocation
from apps.telemetry.models import GpuMinuteRollup
from tests.conftest import client_for
from tests.dashboards.conftest import rollup
from tests.dashboards.test_views import logged_in
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _states(user) -> dict[str, tuple[str, str]]:
    body = client_for(user).get("/api/v1/dashboards/idle/?range=24h").json()
    (heatmap,) = body["figures"]["gpu-states"]["data"]
    return body, [t for row in heatmap["text"] for t in row if t]


@pytest.fixture
def busy_but_unheld(history):
    """h100-a gpu3 is held by no booking and no job, yet its last minutes report load."""
    gpu3 = Gpu.objects.get(node__hostname="h100-a", index=3)
    now = history["now"]
    GpuMinuteRollup.objects.bulk_create(
        rollup(GpuMinuteRollup, gpu3, now - timedelta(minutes=m), None, util=90)
        for m in range(1, 4)
    )
    return gpu3


def test_unheld_gpu_with_load_is_unallocated_not_busy(platform_admin, busy_but_unheld):
    body, texts = _states(platform_admin)
    # vision's gpu0 is the only busy one (gpu1 has no minute data: held, idle)
    assert body["state_counts"]["busy"] == 1
    assert any(t.startswith("h100-a/gpu3") and ": Unallocated (free)" in t for t in texts)
    assert not any(t.startswith("h100-a/gpu3") and "Busy" in t for t in texts)


def test_gpu_of_a_running_job_outside_bookings_is_its_teams(
    platform_admin, other_team, busy_but_unheld
):
    job = JobFactory(team=other_team, status=JobStatus.RUNNING, gpu_count=1)
    JobAllocation.objects.create(job=job, gpu=busy_but_unheld, start=timezone.now())
    body, texts = _states(platform_admin)
    assert body["state_counts"]["busy"] == 2
    assert any(t.startswith("h100-a/gpu3") and ": Busy (nlp)" in t for t in texts)


def test_idle_page_lists_unheld_gpu_as_unallocated(platform_admin, busy_but_unheld):
    html = logged_in(platform_admin).get("/dashboards/idle/").content.decode()
    item = html.split('data-gpu="h100-a/gpu3"', 1)[1].split("</li>", 1)[0]
    assert '<span data-state="unallocated">Unallocated (free)</span>' in item
    assert "Unallocated (free): <strong>" in html
