"""A GPU's page: its activity over 24 h / 7 d from the rollups, who held it (bookings and
jobs, other teams' without names), its and its node's health events; linked from the fleet."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet import services as fleet_services
from apps.fleet.models import Gpu
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup
from tests.factories import JobFactory, make_booking

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu(fleet):
    return Gpu.objects.get(node__hostname="h100-a", index=0)


def _rollups(gpu, model, step, count, util):
    now = timezone.now().replace(second=0, microsecond=0)
    model.objects.bulk_create(
        model(gpu=gpu, bucket=now - step * (i + 1), samples=4, util_avg=util, busy_seconds=0,
              mem_used_avg_mib=2048.0)
        for i in range(count)
    )  # fmt: skip


def _figure(response):
    return response.context["figures"]["gpu-activity"]


def test_last_24h_reads_minute_rollups_and_7d_hour_rollups(client, member, gpu):
    _rollups(gpu, GpuMinuteRollup, timedelta(minutes=1), 90, 40.0)
    _rollups(gpu, GpuHourRollup, timedelta(hours=1), 100, 70.0)
    _rollups(gpu, GpuHourRollup, timedelta(days=8), 1, 10.0)  # older than the week
    client.force_login(member)
    day = _figure(client.get(f"/dashboards/gpus/{gpu.pk}/"))
    util = next(t for t in day["data"] if t["name"] == "Utilization %")
    assert len(util["x"]) == 90 and set(util["y"]) == {40.0}
    memory = next(t for t in day["data"] if t["name"] == "Memory used")
    assert set(memory["y"]) == {2.0}
    week = _figure(client.get(f"/dashboards/gpus/{gpu.pk}/?range=7d"))
    util = next(t for t in week["data"] if t["name"] == "Utilization %")
    assert len(util["x"]) == 100 and set(util["y"]) == {70.0}


def test_unknown_range_says_so_and_shows_the_last_day(client, member, gpu):
    client.force_login(member)
    response = client.get(f"/dashboards/gpus/{gpu.pk}/?range=1y")
    assert response.status_code == 200 and response.context["range"] == "24h"
    assert "Unknown range “1y”: choose one of 24h, 7d." in response.content.decode()
    assert "No telemetry for this GPU in this window." in response.content.decode()


def test_holders_are_bookings_and_jobs_other_teams_without_names(
    client, member, outsider, team, other_team, gpu
):
    now = timezone.now()
    booking = make_booking(
        team, member, [gpu], now - timedelta(hours=5), now - timedelta(hours=3), purpose="eval"
    )
    job = JobFactory(team=other_team, submitted_by=outsider, name="nlp-secret", gpu_model=gpu.model)
    job.allocations.create(gpu=gpu, start=now - timedelta(hours=2))
    old = JobFactory(team=team, submitted_by=member, name="too-old", gpu_model=gpu.model)
    old.allocations.create(gpu=gpu, start=now - timedelta(days=3), end=now - timedelta(days=2))
    client.force_login(member)
    response = client.get(f"/dashboards/gpus/{gpu.pk}/")
    holders = [(h["kind"], h["id"], h["visible"]) for h in response.context["holders"]]
    assert holders == [("booking", booking.pk, True), ("job", job.pk, False)]
    html = response.content.decode()
    assert f'href="/reservations/{booking.pk}/"' in html and "eval" in html
    assert "nlp-secret" not in html and f'href="/jobs/{job.pk}/"' not in html
    week = client.get(f"/dashboards/gpus/{gpu.pk}/?range=7d").context["holders"]
    assert ("job", old.pk) in [(h["kind"], h["id"]) for h in week]


def test_health_events_of_the_gpu_and_its_node(client, member, gpu, platform_admin):
    other = Gpu.objects.get(node__hostname="h100-b", index=0)
    fleet_services.gpu_set_health(gpu=gpu, health="degraded", reason="XID 79: fell off the bus")
    fleet_services.gpu_set_health(gpu=other, health="degraded", reason="XID 48 elsewhere")
    fleet_services.node_change_state(
        node=gpu.node, operation="drain", actor=platform_admin, reason="swap PSU"
    )
    client.force_login(member)
    response = client.get(f"/dashboards/gpus/{gpu.pk}/")
    reasons = [e.reason for e in response.context["events"]]
    assert reasons == ["swap PSU", "XID 79: fell off the bus"]
    html = response.content.decode()
    assert "health healthy → degraded" in html and "XID 48" not in html


def test_fleet_page_links_each_gpu_page(client, member, gpu):
    client.force_login(member)
    html = client.get("/fleet/").content.decode()
    assert f'href="/dashboards/gpus/{gpu.pk}/"' in html


def test_unknown_gpu_is_404_and_page_needs_sign_in(client, member, gpu):
    assert client.get(f"/dashboards/gpus/{gpu.pk}/").status_code == 302
    client.force_login(member)
    assert client.get("/dashboards/gpus/999999/").status_code == 404
