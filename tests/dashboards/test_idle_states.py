"""The idle dashboard's "GPUs now": a GPU nobody holds is unallocated (free) whatever its
telemetry says, a GPU a running job holds outside any booking belongs to the job's team, and a
GPU whose node is powered down to save energy is powered down, neither idle nor free."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.dashboards.selectors import UNALLOCATED
from apps.fleet.choices import GpuHealth, PowerState
from apps.fleet.models import Gpu, Node
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


@pytest.fixture
def l40s_powered_down(history):
    """The unallocated L40S node is powered down to save energy."""
    Node.objects.filter(hostname="l40s-a").update(power_state=PowerState.OFF)
    return list(Gpu.objects.filter(node__hostname="l40s-a").order_by("index"))


def test_gpus_of_a_powered_down_node_are_powered_down_not_free_capacity(
    platform_admin, history, l40s_powered_down
):
    before, _ = _states(platform_admin)
    Node.objects.filter(hostname="l40s-a").update(power_state=PowerState.ON)
    on, _ = _states(platform_admin)
    Node.objects.filter(hostname="l40s-a").update(power_state=PowerState.OFF)
    off = len(l40s_powered_down)
    assert before["state_counts"]["powered_down"] == off
    assert before["state_counts"][UNALLOCATED] == on["state_counts"][UNALLOCATED] - off
    assert before["state_counts"]["held_idle"] == on["state_counts"]["held_idle"]
    _, texts = _states(platform_admin)
    assert any(
        t.startswith("l40s-a/gpu0") and ": Powered down (saving energy), node off" in t
        for t in texts
    )
    assert not any(t.startswith("l40s-a/") and "Unallocated" in t for t in texts)


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (PowerState.SUSPENDING, "powering off"),
        (PowerState.RESUMING, "powering on"),
        (PowerState.RESUME_FAILED, "did not power on"),
    ],
)
def test_a_node_between_power_states_is_powered_down_too(platform_admin, history, state, words):
    Node.objects.filter(hostname="l40s-a").update(power_state=state)
    html = logged_in(platform_admin).get("/dashboards/idle/").content.decode()
    item = html.split('data-gpu="l40s-a/gpu0"', 1)[1].split("</li>", 1)[0]
    assert '<span data-state="powered_down">Powered down (saving energy)</span>' in item
    assert f'data-power="{words}">· node {words}</span>' in item


def test_a_held_gpu_on_a_powered_down_node_is_powered_down_with_its_team(platform_admin, history):
    # vision's booking holds h100-a gpu0-1; the node is being woken for it.
    Node.objects.filter(hostname="h100-a").update(power_state=PowerState.RESUMING)
    body, texts = _states(platform_admin)
    assert body["state_counts"]["busy"] == 0
    assert any(
        t.startswith("h100-a/gpu0")
        and "Powered down (saving energy), node powering on (vision)" in t
        for t in texts
    )


def test_an_unhealthy_gpu_on_a_powered_down_node_stays_unhealthy(platform_admin, l40s_powered_down):
    Gpu.objects.filter(pk=l40s_powered_down[0].pk).update(health=GpuHealth.DEGRADED)
    body, texts = _states(platform_admin)
    assert body["state_counts"]["unhealthy"] >= 1
    assert any(t.startswith("l40s-a/gpu0") and "Unhealthy" in t for t in texts)
