"""A malformed or unstorable telemetry message never blocks the others: it is parked as a dead
letter with its reason, counted once, and the rest of the drain is stored."""

from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db import connection

from apps.fleet.choices import NodeStatus
from apps.fleet.models import Gpu, Node
from apps.telemetry import ingest as services
from apps.telemetry.drain import processing_registry, telemetry_drain
from apps.telemetry.ingest import telemetry_ingest_many
from apps.telemetry.models import GpuSample, IngestBatch, TelemetryCounter, TelemetryDeadLetter
from apps.telemetry.services import nodes_mark_unreachable
from portal.celery import app
from tests.telemetry.conftest import batch, sample


@pytest.fixture
def telemetry_queue():
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(settings.TELEMETRY_QUEUE)

    def send(payload):
        app.send_task("telemetry.ingest", args=[payload], queue=settings.TELEMETRY_QUEUE)

    yield send
    client.delete(settings.TELEMETRY_QUEUE)


def _uuids(host):
    return sorted(Gpu.objects.filter(node__hostname=host).values_list("uuid", flat=True))


def _malformed():
    row = TelemetryCounter.objects.filter(name="samples_rejected", reason="malformed").first()
    return row.value if row else 0


POISON = {
    "uuid is a list": lambda u, ts: batch(90, [sample([u], ts)]),
    "health is a list": lambda u, ts: batch(91, [sample(u, ts, health=["lost"])]),
    "seq of 2**63": lambda u, ts: batch(2**63, [sample(u, ts)]),
    "negative seq": lambda u, ts: batch(-1, [sample(u, ts)]),
    "NUL in node": lambda u, ts: batch(92, [sample(u, ts)], node="h100-a\x00"),
    "huge node name": lambda u, ts: batch(93, [sample(u, ts)], node="n" * 300),
    "seq is a float": lambda u, ts: batch(94.0, [sample(u, ts)]),
    "lone surrogate in node": lambda u, ts: batch(95, [sample(u, ts)], node="probe-\ud800"),
}


@pytest.mark.django_db(transaction=True)
def test_poison_messages_are_parked_and_the_fleet_keeps_reporting(fleet, now, telemetry_queue):
    a, b = _uuids("h100-a"), _uuids("h100-b")
    for make in POISON.values():
        telemetry_queue(make(a[0], now.timestamp()))
    for seq in (1, 2):
        telemetry_queue(batch(seq, [sample(u, now.timestamp() + seq) for u in a]))
        telemetry_queue(batch(seq, [sample(u, now.timestamp() + seq) for u in b], node="h100-b"))

    result = telemetry_drain(max_batches=100)

    assert result["batches"] == len(POISON) + 4
    assert result["stored"] == 4 * 8  # every good sample, despite the poison around it
    assert GpuSample.objects.count() == 32
    # Batch-level poison is parked with a reason; the two sample-level ones are rejected samples.
    parked = list(TelemetryDeadLetter.objects.values_list("reason", flat=True))
    assert len(parked) == len(POISON) - 2
    assert any("sequence number out of range" in reason for reason in parked)
    assert any("control characters" in reason for reason in parked)
    assert _malformed() == len(POISON)  # one sample each, counted once
    assert telemetry_drain()["batches"] == 0  # nothing requeued
    assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UP}
    letters = TelemetryCounter.objects.filter(name="dead_letters").values_list("value", flat=True)
    assert sum(letters) == len(parked)


@pytest.mark.django_db
def test_fallback_to_one_by_one_counts_malformed_once(fleet, now):
    """A resent sample makes the group COPY fail and the drain go batch by batch: the
    malformed batch in the group is still counted and parked exactly once."""
    a = _uuids("h100-a")
    telemetry_ingest_many(batches=[batch(1, [sample(a[0], now.timestamp())])])
    results = telemetry_ingest_many(
        batches=[
            batch(2, [sample(a[0], now.timestamp()), sample(a[1], now.timestamp())]),  # resent
            {"node": ["h100-a"], "seq": 3, "samples": [sample(a[2], now.timestamp())]},
            batch(4, [sample(a[3], now.timestamp())]),
        ]
    )
    assert [r.stored for r in results] == [1, 0, 1]
    assert _malformed() == 1
    assert TelemetryDeadLetter.objects.count() == 1
    assert IngestBatch.objects.count() == 3


@pytest.mark.django_db
def test_batch_the_database_refuses_is_parked_alone(fleet, now, monkeypatch):
    """Whatever a batch makes go wrong while storing it (here: the database refuses a value)
    parks that batch only; the batches beside it are stored."""
    from django.db import DataError

    a, b = _uuids("h100-a"), _uuids("h100-b")
    clean = services._clean_batch

    def refuse_node_b(samples, gpus, now_, result):
        if any(s.get("uuid") in b for s in samples):
            raise DataError("value out of range for type integer")
        return clean(samples, gpus, now_, result)

    monkeypatch.setattr(services, "_clean_batch", refuse_node_b)
    results = telemetry_ingest_many(
        batches=[
            batch(1, [sample(u, now.timestamp()) for u in a]),
            batch(1, [sample(u, now.timestamp()) for u in b], node="h100-b"),
        ]
    )
    assert [r.stored for r in results] == [8, 0]
    letter = TelemetryDeadLetter.objects.get()
    assert letter.node == "h100-b" and "DataError" in letter.reason
    assert "value out of range" in letter.error
    assert _malformed() == 8


@pytest.mark.django_db
def test_lost_database_connection_is_not_parked(fleet, now, monkeypatch):
    """A connection loss is not the batch's fault: it raises, so the drain keeps the messages."""
    from django.db import OperationalError

    def connection_lost(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(services, "_clean_batch", connection_lost)
    with pytest.raises(OperationalError):
        telemetry_ingest_many(batches=[batch(1, [sample(_uuids("h100-a")[0], now.timestamp())])])
    assert not TelemetryDeadLetter.objects.exists()


@pytest.mark.django_db
def test_dead_letters_are_counted_on_metrics_by_reason(fleet, now):
    from apps.telemetry.metrics import TelemetryCollector

    telemetry_ingest_many(batches=[batch(2**63, [sample(_uuids("h100-a")[0], now.timestamp())])])
    families = {family.name: family for family in TelemetryCollector().collect()}
    samples = families["portal_telemetry_dead_letters"].samples
    assert [(s.labels["reason"], s.value) for s in samples] == [("sequence number out of range", 1)]


def _queue_is_empty() -> bool:
    """Nothing left in the queue and no drain's processing list still registered."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    return client.llen(settings.TELEMETRY_QUEUE) == 0 and client.zcard(processing_registry()) == 0


def _send_good_and_poison(send, now, poison):
    """Two batches of each H100 node around one poison message; the nodes were last heard
    from long ago, so only this drain keeps them reachable."""
    Node.objects.update(last_seen=now - timedelta(hours=1))
    a, b = _uuids("h100-a"), _uuids("h100-b")
    send(batch(1, [sample(u, now.timestamp() + 1) for u in a]))
    send(batch(1, [sample(u, now.timestamp() + 1) for u in b], node="h100-b"))
    send(poison)
    send(batch(2, [sample(u, now.timestamp() + 2) for u in a]))
    send(batch(2, [sample(u, now.timestamp() + 2) for u in b], node="h100-b"))


@pytest.mark.django_db(transaction=True)
def test_a_lone_surrogate_is_parked_once_and_every_node_stays_reachable(
    fleet, now, telemetry_queue
):
    """A node name holding a lone surrogate once made writing its dead letter fail; the
    fallback re-raised and every drain put all messages back, so no node was heard from."""
    poison = batch(7, [sample("GPU-\ud800", now.timestamp(), health="\udfff")], node="probe-\ud800")
    _send_good_and_poison(telemetry_queue, now, poison)

    result = telemetry_drain(max_batches=100)

    assert result == {"batches": 5, "stored": 32, "duplicates": 0}
    assert GpuSample.objects.count() == 32
    assert _queue_is_empty()
    assert [n for n in nodes_mark_unreachable() if n.startswith("h100")] == []
    assert set(
        Node.objects.filter(hostname__startswith="h100").values_list("status", flat=True)
    ) == {NodeStatus.UP}
    letter = TelemetryDeadLetter.objects.get()
    assert letter.node == "probe-\\ud800"  # kept escaped, as text PostgreSQL can hold
    assert "control characters" in letter.reason
    assert '"probe-\\ud800"' in letter.payload and '"GPU-\\ud800"' in letter.payload

    # The same message delivered again (a drain that died after parking it) is not parked twice.
    telemetry_queue(poison)
    assert telemetry_drain()["duplicates"] == 1
    assert TelemetryDeadLetter.objects.count() == 1
    assert (
        sum(TelemetryCounter.objects.filter(name="dead_letters").values_list("value", flat=True))
        == 1
    )


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_cannot_even_be_parked_never_sends_the_drain_back(fleet, now, telemetry_queue):
    """The last resort cannot raise: here PostgreSQL refuses every dead letter (a trigger), and
    still the good batches are stored, the queue is drained and the nodes stay reachable."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION refuse_dead_letter() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'dead letters refused'; END $$ LANGUAGE plpgsql;"
            "CREATE TRIGGER refuse_dead_letter BEFORE INSERT ON telemetry_telemetrydeadletter "
            "FOR EACH ROW EXECUTE FUNCTION refuse_dead_letter();"
        )
    try:
        _send_good_and_poison(telemetry_queue, now, batch(7, [], node="probe-\ud800"))
        result = telemetry_drain(max_batches=100)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER refuse_dead_letter ON telemetry_telemetrydeadletter;"
                "DROP FUNCTION refuse_dead_letter();"
            )
    assert result["stored"] == 32 and GpuSample.objects.count() == 32
    assert not TelemetryDeadLetter.objects.exists()
    assert _queue_is_empty()
    assert [n for n in nodes_mark_unreachable() if n.startswith("h100")] == []
