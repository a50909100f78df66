"""The idle dashboard says what each GPU's busy/idle state is judged on: SM activity where the
GPU reports GPM metrics, utilization % otherwise."""

import pytest

from apps.fleet.models import Gpu
from apps.telemetry.models import GpuMinuteRollup
from tests.conftest import client_for
from tests.dashboards.test_views import logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpm_history(history):
    """h100-a gpu0 reports SM activity (busy at 40 %); gpu2 has utilization only."""
    gpu0 = Gpu.objects.get(node__hostname="h100-a", index=0)
    GpuMinuteRollup.objects.filter(gpu=gpu0).update(sm_active_avg=40.0, sm_occupancy_avg=20.0)
    return history


def test_idle_api_counts_gpus_by_signal_and_names_it_per_gpu(platform_admin, gpm_history):
    body = client_for(platform_admin).get("/api/v1/dashboards/idle/?range=24h").json()
    # gpu0: SM activity; gpu2: utilization; the others have no recent telemetry
    assert body["signal_counts"] == {"sm_active": 1, "util": 1}
    (heatmap,) = body["figures"]["gpu-states"]["data"]
    texts = [t for row in heatmap["text"] for t in row if t]
    assert any(t.startswith("h100-a/gpu0") and "judged on SM activity" in t for t in texts)
    assert any(t.startswith("h100-a/gpu2") and "judged on utilization %" in t for t in texts)
    assert not any(t.startswith("h100-a/gpu3") and "judged" in t for t in texts)


def test_idle_page_says_which_signal_each_gpu_uses(platform_admin, gpm_history):
    html = logged_in(platform_admin).get("/dashboards/idle/").content.decode()
    assert 'data-signal="sm_active"' in html and 'data-signal="util"' in html
    assert "SM activity (GPM) for <strong>1</strong> GPU " in html


def test_gpu_below_sm_threshold_is_not_busy_even_at_full_utilization(platform_admin, gpm_history):
    gpu0 = Gpu.objects.get(node__hostname="h100-a", index=0)
    # what the rollups store for a GPU running tiny kernels: util 100, SM 1 %, never busy
    GpuMinuteRollup.objects.filter(gpu=gpu0).update(
        util_avg=100, util_max=100, sm_active_avg=1.0, busy_seconds=0
    )
    body = client_for(platform_admin).get("/api/v1/dashboards/idle/?range=24h").json()
    assert body["state_counts"]["busy"] == 0 and body["state_counts"]["held_idle"] == 3


def test_utilization_heatmap_shows_sm_activity_where_the_gpus_report_it(
    platform_admin, gpm_history
):
    """history: vision's H100 gpu0 at 80 % utilization; with GPM its SM activity (40 %) is
    what the team/model heatmap shows, labelled as such; nlp's H100 without GPM shows
    utilization."""
    body = client_for(platform_admin).get("/api/v1/dashboards/utilization/?range=24h").json()
    (heat,) = body["figures"]["util-team-model"]["data"]
    cells = {
        (team, model): (z, text, hover)
        for team, zs, texts, hovers in zip(
            heat["y"], heat["z"], heat["text"], heat["customdata"], strict=True
        )
        for model, z, text, hover in zip(heat["x"], zs, texts, hovers, strict=True)
    }
    z, text, hover = cells[("vision", "H100-SXM-80GB")]
    assert (z, text) == (40.0, "40% SM")
    assert hover == "vision on H100-SXM-80GB: SM activity 40.0% (utilization 80.0%)"
    z, text, hover = cells[("nlp", "H100-SXM-80GB")]
    assert (z, text) == (0.0, "0%") and "no GPM metrics" in hover
