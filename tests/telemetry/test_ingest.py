import math

import pytest
from django.db import connection

from apps.audit.models import AuditEvent
from apps.fleet.choices import GpuHealth, NodeStatus
from apps.fleet.models import Gpu, Node
from apps.fleet.services import node_register
from apps.telemetry.ingest import telemetry_ingest
from apps.telemetry.models import GpuSample, IngestBatch, TelemetryCounter
from apps.telemetry.services import nodes_mark_unreachable
from tests.telemetry.conftest import batch, sample

pytestmark = pytest.mark.django_db


def test_batch_is_stored_once_even_when_delivered_twice(node_gpus, now):
    uuids = sorted(node_gpus)
    payload = batch(1, [sample(u, now.timestamp()) for u in uuids])
    first = telemetry_ingest(batch=payload)
    again = telemetry_ingest(batch=payload)
    assert first.stored == 8 and not first.duplicate_batch
    assert again.stored == 0 and again.duplicate_batch
    assert GpuSample.objects.count() == 8 and IngestBatch.objects.count() == 1


def test_overlapping_batches_fall_back_to_on_conflict_and_keep_new_rows(node_gpus, now):
    uuids = sorted(node_gpus)
    telemetry_ingest(batch=batch(1, [sample(u, now.timestamp()) for u in uuids[:4]]))
    # a new batch repeating two old samples (e.g. flushed from the agent's buffer) plus new ones
    mixed = [sample(u, now.timestamp()) for u in uuids[:2]] + [
        sample(u, now.timestamp() + 15) for u in uuids
    ]
    result = telemetry_ingest(batch=batch(2, mixed))
    assert result.stored == 8
    assert GpuSample.objects.count() == 12


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"uuid": "GPU-unknown"}, "unknown_gpu"),
        ({"ts": "yesterday"}, "bad_timestamp"),
        ({"ts": math.nan}, "bad_timestamp"),
        ({"ts": 4_102_444_800}, "timestamp_out_of_range"),  # year 2100
        ({"ts": 0}, "timestamp_out_of_range"),
        ({"util_gpu": 150}, "value_out_of_range"),
        ({"power_w": -3.0}, "value_out_of_range"),
        ({"temp_c": math.inf}, "bad_value"),
        ({"mem_used_mib": "lots"}, "bad_value"),
        ({"util_gpu": True}, "bad_value"),
        ({"sm_active": 100.5}, "value_out_of_range"),
        ({"sm_occupancy": -1}, "value_out_of_range"),
        ({"tensor_active": "busy"}, "bad_value"),
        ({"dram_bw_util": math.nan}, "bad_value"),
        ({"sm_active": False}, "bad_value"),
    ],
)
def test_bad_samples_are_rejected_and_counted_good_ones_kept(node_gpus, now, bad, reason):
    uuids = sorted(node_gpus)
    good = [sample(u, now.timestamp()) for u in uuids[1:]]
    broken = {**sample(uuids[0], now.timestamp()), **bad}
    result = telemetry_ingest(batch=batch(7, [broken, *good]))
    assert result.stored == 7 and result.rejected == {reason: 1}
    assert TelemetryCounter.objects.get(name="samples_rejected", reason=reason).value == 1
    assert GpuSample.objects.count() == 7


@pytest.mark.parametrize(
    "payload",
    [
        None,
        "garbage",
        [],
        {"node": "h100-a"},
        {"node": "h100-a", "seq": "x", "samples": []},
        {"node": 5, "seq": 1, "samples": []},
        {"node": "ghost", "seq": 1, "samples": [{}]},
    ],
)
def test_malformed_batches_never_raise(fleet, payload):
    result = telemetry_ingest(batch=payload)
    assert result.stored == 0 and sum(result.rejected.values()) >= 1
    assert not GpuSample.objects.exists()


def test_sample_of_another_nodes_gpu_is_rejected(fleet, node_gpus, now):
    other = Gpu.objects.filter(node__hostname="h100-b").first()
    result = telemetry_ingest(batch=batch(1, [sample(other.uuid, now.timestamp())]))
    assert result.rejected == {"unknown_gpu": 1}


def test_null_fields_are_stored_as_null(node_gpus, now):
    uuid = sorted(node_gpus)[0]
    telemetry_ingest(batch=batch(1, [sample(uuid, now.timestamp(), util=None, power_w=None)]))
    row = GpuSample.objects.get()
    assert row.util_gpu is None and row.power_w is None and row.temp_c == 55


def test_lost_gpu_leaves_the_pool_and_comes_back_audited(node_gpus, now):
    uuid = sorted(node_gpus)[0]
    telemetry_ingest(batch=batch(1, [{"uuid": uuid, "ts": now.timestamp(), "health": "lost"}]))
    assert Gpu.objects.get(uuid=uuid).health == GpuHealth.LOST
    assert not Gpu.objects.schedulable().filter(uuid=uuid).exists()
    telemetry_ingest(batch=batch(2, [sample(uuid, now.timestamp() + 15)]))
    assert Gpu.objects.get(uuid=uuid).health == GpuHealth.HEALTHY
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        "gpu.health_lost",
        "gpu.health_healthy",
    ]


def test_silent_node_turns_unreachable_then_up_on_next_batch(
    node_gpus, now, settings, drain_listening
):
    from datetime import timedelta

    settings.TELEMETRY_POLL_SECONDS = 15
    Node.objects.filter(hostname="h100-a").update(last_seen=now - timedelta(seconds=44))
    assert nodes_mark_unreachable(now=now) == []
    Node.objects.filter(hostname="h100-a").update(last_seen=now - timedelta(seconds=46))
    assert nodes_mark_unreachable(now=now) == ["h100-a"]
    assert not Gpu.objects.schedulable().filter(node__hostname="h100-a").exists()
    telemetry_ingest(batch=batch(1, [sample(sorted(node_gpus)[0], now.timestamp())]))
    assert Node.objects.get(hostname="h100-a").status == NodeStatus.UP
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        "node.unreachable",
        "node.up",
    ]


def test_registration_creates_updates_and_is_idempotent(db):
    inventory = {
        "node": "gpu-new-01",
        "backend": "simulated",
        "gpus": [
            {
                "uuid": f"GPU-new-{i}",
                "index": i,
                "name": "H200-SXM-141GB",
                "memory_mib": 143771,
                "nvlink_domain": "nvl0",
                "mig_devices": [],
            }
            for i in range(4)
        ],
    }
    inventory["gpus"][0]["mig_devices"] = [
        {"uuid": "MIG-new-0-0", "index": 0, "profile": "3g.71gb", "memory_mib": 71000}
    ]
    node_register(inventory=inventory)
    node_register(inventory=inventory)
    assert Gpu.objects.filter(node__hostname="gpu-new-01", mig_parent__isnull=True).count() == 4
    mig = Gpu.objects.get(uuid="MIG-new-0-0")
    assert mig.mig_parent.uuid == "GPU-new-0" and mig.mig_profile == "3g.71gb"
    assert Gpu.objects.get(uuid="GPU-new-1").nvlink_domain == "gpu-new-01/nvl0"
    assert AuditEvent.objects.filter(action="node.register").count() == 1
    inventory["gpus"][3]["nvlink_domain"] = "nvl1"
    node_register(inventory=inventory)
    event = AuditEvent.objects.filter(action="node.register").order_by("id").last()
    assert event.after["changes"] == ["updated GPU-new-3: nvlink_domain"]


def test_copy_path_is_used_on_postgresql(node_gpus, now):
    assert connection.vendor == "postgresql"
    rows = [sample(u, now.timestamp() + i) for i in range(50) for u in sorted(node_gpus)]
    assert telemetry_ingest(batch=batch(3, rows)).stored == 400
