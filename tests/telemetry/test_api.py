from datetime import timedelta

import pytest

from apps.telemetry.choices import IdleKind
from apps.telemetry.ingest import store_samples, telemetry_ingest
from apps.telemetry.models import IdleInterval
from apps.telemetry.rollups import rollup_minutes
from tests.conftest import client_for
from tests.telemetry.conftest import batch, sample

pytestmark = pytest.mark.django_db


def test_gpu_series_is_downsampled_to_the_step(member, fleet, h100, now):
    gpu = h100.gpus.order_by("id").first()
    start = now.replace(minute=now.minute - now.minute % 5, second=0) - timedelta(minutes=10)
    store_samples(
        [
            (gpu.id, start + timedelta(seconds=15 * i), i % 100, 1, 100, 200.0, 40, 0)
            for i in range(40)
        ]
    )
    rollup_minutes(start=start, end=start + timedelta(minutes=10))
    api = client_for(member)
    raw = api.get(
        f"/api/v1/telemetry/gpus/{gpu.pk}/",
        {
            "start": start.isoformat(),
            "end": (start + timedelta(minutes=10)).isoformat(),
            "step": "00:00:30",
        },
    ).json()
    assert len(raw["points"]) == 20 and raw["points"][0]["util_avg"] == 0.5
    per_minute = api.get(
        f"/api/v1/telemetry/gpus/{gpu.pk}/",
        {
            "start": start.isoformat(),
            "end": (start + timedelta(minutes=10)).isoformat(),
            "step": "00:05:00",
        },
    ).json()
    assert [p["util_avg"] for p in per_minute["points"]] == [9.5, 29.5]
    assert per_minute["points"][1]["util_max"] == 39
    too_fine = api.get(
        f"/api/v1/telemetry/gpus/{gpu.pk}/",
        {"start": (now - timedelta(days=30)).isoformat(), "step": "00:00:15"},
    )
    assert too_fine.status_code == 400 and "step" in too_fine.json()["detail"]
    assert api.get("/api/v1/telemetry/gpus/999999/").status_code == 404


def test_idle_summary_hides_other_teams_held_idle_time(
    member, finance_user, quotas, fleet, h100, now
):
    gpus = list(h100.gpus.order_by("id")[:3])
    start = now - timedelta(hours=2)
    IdleInterval.objects.create(
        gpu=gpus[0],
        kind=IdleKind.HELD_IDLE,
        team=quotas[0].team,
        start=start,
        end=start + timedelta(hours=1),
    )
    IdleInterval.objects.create(
        gpu=gpus[1],
        kind=IdleKind.HELD_IDLE,
        team=quotas[1].team,
        start=start,
        end=start + timedelta(minutes=30),
    )
    IdleInterval.objects.create(gpu=gpus[2], kind=IdleKind.UNALLOCATED, start=start, end=now)
    window = {"start": (now - timedelta(hours=3)).isoformat(), "end": now.isoformat()}
    everything = client_for(finance_user).get("/api/v1/idle/", window).json()["gpu_hours"]
    assert {(r["kind"], r["team"]): r["gpu_hours"] for r in everything} == {
        ("held_idle", "vision"): 1.0,
        ("held_idle", "nlp"): 0.5,
        ("unallocated", None): 2.0,
    }
    mine = client_for(member).get("/api/v1/idle/", window).json()
    assert {(r["kind"], r["team"]) for r in mine["gpu_hours"]} == {
        ("held_idle", "vision"),
        ("unallocated", None),
    }
    assert mine["now"]["unallocated"] == [gpus[2].uuid]


def test_metrics_count_stored_and_rejected_samples(client, fleet, now):
    from apps.fleet.models import Gpu

    uuid = Gpu.objects.filter(node__hostname="h100-a").first().uuid
    telemetry_ingest(batch=batch(1, [sample(uuid, now.timestamp()), {"uuid": "GPU-x", "ts": 1}]))
    telemetry_ingest(batch=batch(1, [sample(uuid, now.timestamp())]))
    from django.test import override_settings

    with override_settings(METRICS_PUBLIC=True):  # /metrics needs a login by default
        text = client.get("/metrics").content.decode()
    assert "portal_telemetry_samples_stored_total 1.0" in text, text[-900:]
    assert 'portal_telemetry_samples_rejected_total{reason="unknown_gpu"} 1.0' in text
    assert "portal_telemetry_batches_duplicate_total 1.0" in text


def test_gpu_series_carries_sm_activity_where_the_gpu_reports_it(member, fleet, h100, now):
    gpm_gpu, plain_gpu = h100.gpus.order_by("id")[:2]
    start = now.replace(second=0) - timedelta(minutes=10)
    rows = [
        (gpu.id, start + timedelta(seconds=15 * i), 100, 1, 100, 200.0, 40, 0, sm, None, None, None)
        for gpu, sm in ((gpm_gpu, 2.0), (plain_gpu, None))
        for i in range(8)
    ]
    store_samples(rows)
    rollup_minutes(start=start, end=start + timedelta(minutes=2))
    api = client_for(member)
    window = {"start": start.isoformat(), "end": (start + timedelta(minutes=2)).isoformat()}
    for step in ("00:00:30", "00:01:00"):
        points = api.get(f"/api/v1/telemetry/gpus/{gpm_gpu.pk}/", {**window, "step": step}).json()
        assert [p["sm_active"] for p in points["points"]] == [2.0] * len(points["points"])
        plain = api.get(f"/api/v1/telemetry/gpus/{plain_gpu.pk}/", {**window, "step": step})
        assert {p["sm_active"] for p in plain.json()["points"]} == {None}
