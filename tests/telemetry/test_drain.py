"""Batches queued on the real Redis telemetry queue are drained into one transaction."""

import pytest
from django.conf import settings

from apps.telemetry.drain import telemetry_drain
from apps.telemetry.ingest import telemetry_ingest_many
from apps.telemetry.models import GpuSample, IngestBatch
from portal.celery import app
from tests.telemetry.conftest import batch, sample


@pytest.mark.django_db(transaction=True)
def test_drain_stores_queued_batches_and_acks_them(fleet, now, telemetry_queue):
    from apps.fleet.models import Gpu

    uuids = {
        host: sorted(Gpu.objects.filter(node__hostname=host).values_list("uuid", flat=True))
        for host in ("h100-a", "h100-b")
    }
    for seq in range(1, 4):
        for host, gpus in uuids.items():
            telemetry_queue(batch(seq, [sample(u, now.timestamp() + seq) for u in gpus], node=host))
    telemetry_queue(batch(1, [sample(uuids["h100-a"][0], now.timestamp() + 1)]))  # redelivery
    telemetry_queue("not a batch")
    result = telemetry_drain(max_batches=100)
    assert result == {"batches": 8, "stored": 48, "duplicates": 1}
    assert GpuSample.objects.count() == 48 and IngestBatch.objects.count() == 6
    assert telemetry_drain() == {"batches": 0, "stored": 0, "duplicates": 0}  # acked: gone


@pytest.mark.django_db(transaction=True)
def test_drain_takes_at_most_max_batches(fleet, now, telemetry_queue):
    from apps.fleet.models import Gpu

    uuid = Gpu.objects.filter(node__hostname="h100-a").first().uuid
    for seq in range(5):
        telemetry_queue(batch(seq, [sample(uuid, now.timestamp() + seq)]))
    assert telemetry_drain(max_batches=3)["stored"] == 3
    assert telemetry_drain(max_batches=3)["stored"] == 2


@pytest.mark.django_db(transaction=True)
def test_failed_drain_requeues_everything(fleet, now, telemetry_queue, monkeypatch):
    from apps.fleet.models import Gpu
    from apps.telemetry import drain

    uuid = Gpu.objects.filter(node__hostname="h100-a").first().uuid
    telemetry_queue(batch(1, [sample(uuid, now.timestamp())]))
    telemetry_queue(batch(2, [sample(uuid, now.timestamp() + 15)]))

    def database_down(**kwargs):
        raise ConnectionError("database went away")

    monkeypatch.setattr(drain, "telemetry_ingest_many", database_down)
    with pytest.raises(ConnectionError):
        telemetry_drain()
    monkeypatch.undo()
    assert telemetry_drain()["stored"] == 2
    assert not GpuSample.objects.filter(ts__isnull=True).exists()


@pytest.mark.django_db
def test_many_batches_with_a_resent_sample_fall_back_batch_by_batch(fleet, now):
    from apps.fleet.models import Gpu

    uuid = Gpu.objects.filter(node__hostname="h100-a").first().uuid
    telemetry_ingest_many(batches=[batch(1, [sample(uuid, now.timestamp())])])
    results = telemetry_ingest_many(
        batches=[
            batch(2, [sample(uuid, now.timestamp()), sample(uuid, now.timestamp() + 15)]),
            batch(3, [sample(uuid, now.timestamp() + 30)]),
        ]
    )
    assert [r.stored for r in results] == [1, 1]
    assert GpuSample.objects.count() == 3
    assert IngestBatch.objects.get(seq=2).stored == 1


@pytest.mark.django_db(transaction=True)
def test_undecodable_message_is_counted_not_requeued_forever(fleet, telemetry_queue):
    from apps.telemetry.models import TelemetryCounter

    with app.connection_for_write() as conn:
        conn.SimpleQueue(settings.TELEMETRY_QUEUE).put({"a": 1}, serializer="pickle")
    assert telemetry_drain()["batches"] == 1
    assert telemetry_drain()["batches"] == 0
    assert TelemetryCounter.objects.get(name="samples_rejected", reason="malformed").value == 1


@pytest.mark.django_db(transaction=True)
def test_a_drain_takes_a_sample_budget_and_leaves_the_rest_queued_in_order(
    fleet, now, telemetry_queue, settings
):
    from apps.fleet.models import Gpu

    settings.TELEMETRY_DRAIN_MAX_SAMPLES = 20
    uuids = list(Gpu.objects.filter(node__hostname="h100-a").values_list("uuid", flat=True))
    for seq in range(1, 8):
        telemetry_queue(batch(seq, [sample(u, now.timestamp() + seq) for u in uuids]))

    def seqs():
        return list(IngestBatch.objects.order_by("seq").values_list("seq", flat=True))

    # 8 samples a batch: the third reaches the budget and is taken whole.
    assert telemetry_drain() == {"batches": 3, "stored": 24, "duplicates": 0}
    assert seqs() == [1, 2, 3]
    assert telemetry_drain()["stored"] == 24
    assert seqs() == [1, 2, 3, 4, 5, 6]
    assert telemetry_drain() == {"batches": 1, "stored": 8, "duplicates": 0}
    assert telemetry_drain()["batches"] == 0
    assert GpuSample.objects.count() == 56


@pytest.mark.django_db(transaction=True)
def test_a_batch_bigger_than_the_budget_is_drained_alone(fleet, now, telemetry_queue):
    from apps.fleet.models import Gpu

    uuid = Gpu.objects.filter(node__hostname="h100-a").first().uuid
    telemetry_queue(batch(1, [sample(uuid, now.timestamp() - i) for i in range(30)]))
    telemetry_queue(batch(2, [sample(uuid, now.timestamp() + 1)]))
    assert telemetry_drain(max_samples=10) == {"batches": 1, "stored": 30, "duplicates": 0}
    assert telemetry_drain(max_samples=10) == {"batches": 1, "stored": 1, "duplicates": 0}


@pytest.mark.django_db(transaction=True)
def test_the_kombu_drain_keeps_the_sample_budget_too(fleet, now, telemetry_queue):
    from apps.fleet.models import Gpu
    from apps.telemetry.drain import _drain_with_kombu

    uuids = list(Gpu.objects.filter(node__hostname="h100-a").values_list("uuid", flat=True))
    for seq in range(1, 5):
        telemetry_queue(batch(seq, [sample(u, now.timestamp() + seq) for u in uuids]))
    assert _drain_with_kombu(100, 10)["stored"] == 16
    assert _drain_with_kombu(100, 10)["stored"] == 16
    assert _drain_with_kombu(100, 10)["batches"] == 0
