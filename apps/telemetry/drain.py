"""Draining the telemetry queue: many agent batches into one transaction, none ever lost.

Agents send their batches as `telemetry.ingest` messages to TELEMETRY_QUEUE, which no worker
consumes directly; beat runs `telemetry_drain` every TELEMETRY_DRAIN_SECONDS.

On Redis (production and tests) a drain moves the messages it takes with LMOVE, one atomic
step each, from the queue into a processing list of its own that is registered in a sorted
set with its start time. Only after the ingest transaction commits is the list deleted. So at
every instant each message is in the queue or in a registered processing list: a worker killed
mid-drain loses nothing, and the next drain moves the lists of drains older than
TELEMETRY_DRAIN_RECOVERY_SECONDS (longer than the drain's hard time limit, so their drain is
surely dead) back to the queue. A batch stored before its drain died comes back as a
redelivery and is skipped by its batch key.

(kombu's own Redis consumer pops a message and records it as unacked in a second step, and
hides unacked messages for `visibility_timeout`, an hour: a kill between the steps lost a
batch, and a kill after them hid hundreds for an hour.)

Other brokers (the demo's filesystem transport) are drained through kombu with acks.
"""

import base64
import json
import logging
import time
import uuid
from queue import Empty

from django.conf import settings
from django.utils import timezone
from kombu.serialization import loads as kombu_loads

from apps.telemetry.ingest import telemetry_ingest_many
from apps.telemetry.services import drain_heartbeat_record

logger = logging.getLogger(__name__)

ACCEPTED_CONTENT = {"application/json"}


def processing_registry() -> str:
    return f"{settings.TELEMETRY_QUEUE}.processing"


def telemetry_drain(
    *, max_batches: int | None = None, max_samples: int | None = None
) -> dict[str, int]:
    """Take queued batches, oldest first, until `max_batches` or until they hold `max_samples`
    samples (the batch that reaches it is taken whole; defaults TELEMETRY_DRAIN_MAX_BATCHES and
    TELEMETRY_DRAIN_MAX_SAMPLES), store them in one transaction (telemetry_ingest_many), then
    forget them. The sample budget keeps one run inside the task's time limit however big the
    batches; the rest waits for the next run. A message that cannot be decoded or stored is
    parked as a dead letter by ingest; only a lost database connection raises, and then every
    message taken goes back to the queue. Each run is recorded for node health
    (`drain_heartbeat_record`)."""
    started = timezone.now()
    max_batches = max_batches or settings.TELEMETRY_DRAIN_MAX_BATCHES
    max_samples = max_samples or settings.TELEMETRY_DRAIN_MAX_SAMPLES
    client = _redis_client()
    if client is None:
        return _drain_with_kombu(max_batches, max_samples, started=started)
    recovered = recover_abandoned(client)
    queue = settings.TELEMETRY_QUEUE
    processing = f"{processing_registry()}.{uuid.uuid4().hex}"
    client.zadd(processing_registry(), {processing: time.time()})
    batches, emptied = _take(client, queue, processing, max_batches, max_samples)
    try:
        results = telemetry_ingest_many(batches=batches) if batches else []
    except Exception:
        _give_back(client, processing, queue)
        raise
    client.pipeline(transaction=True).delete(processing).zrem(
        processing_registry(), processing
    ).execute()
    # Other drains' lists (running, or dead and not yet recovered) hold batches too.
    in_flight = client.zcard(processing_registry())
    drain_heartbeat_record(
        started=started, finished=timezone.now(), backlog=not emptied or in_flight > 0
    )
    return _summary(results, recovered)


TAKE_FIRST = 16  # messages taken in the first round trip, before their size is known
TAKE_MOST = 500


def _take(client, queue: str, processing: str, max_batches: int, max_samples: int):
    """Move messages into `processing` (round trips of several LMOVEs, sized by the batches
    seen so far) until the limits; messages taken past the sample budget go straight back to
    the consuming end, oldest first. Returns the decoded batches and whether the queue ran
    empty."""
    batches: list = []
    samples = 0
    while len(batches) < max_batches and samples < max_samples:
        want = TAKE_FIRST
        if batches:
            per_batch = max(1, samples // len(batches))
            want = min(TAKE_MOST, -(-(max_samples - samples) // per_batch))
        want = min(want, max_batches - len(batches))
        pipe = client.pipeline(transaction=False)
        for _ in range(want):
            pipe.lmove(queue, processing, "RIGHT", "LEFT")
        chunk = [message for message in pipe.execute() if message is not None]
        for index, raw in enumerate(chunk):
            if samples >= max_samples:
                # The newest taken sit at the processing list's head: back, newest first.
                for _ in range(len(chunk) - index):
                    client.lmove(processing, queue, "LEFT", "RIGHT")
                return batches, False
            batch = _batch_from_raw(raw)
            batches.append(batch)
            samples += _samples_in(batch)
        if len(chunk) < want:
            return batches, True
    return batches, False


def _samples_in(batch) -> int:
    """What a batch costs to store, counted in samples (anything else counts as one)."""
    samples = batch.get("samples") if isinstance(batch, dict) else None
    return max(1, len(samples)) if isinstance(samples, list) else 1


def recover_abandoned(client, *, older_than: float | None = None) -> int:
    """Move the messages of drains that died (registered longer ago than the recovery window)
    back to the queue. Returns how many messages came back."""
    window = settings.TELEMETRY_DRAIN_RECOVERY_SECONDS if older_than is None else older_than
    registry = processing_registry()
    moved = 0
    for name in client.zrangebyscore(registry, "-inf", time.time() - window):
        moved += _give_back(client, name.decode(), settings.TELEMETRY_QUEUE)
    if moved:
        logger.warning("telemetry drain: %d messages of an interrupted drain requeued", moved)
    return moved


def _give_back(client, processing: str, queue: str) -> int:
    """Newest first onto the consuming end, so the oldest message is taken first again."""
    moved = 0
    while client.lmove(processing, queue, "LEFT", "RIGHT") is not None:
        moved += 1
    client.zrem(processing_registry(), processing)
    return moved


def _redis_client():
    url = settings.CELERY_BROKER_URL or ""
    if not url.startswith(("redis://", "rediss://")):
        return None
    import redis

    return redis.Redis.from_url(url)


def _summary(results, recovered: int = 0) -> dict[str, int]:
    summary = {
        "batches": len(results),
        "stored": sum(r.stored for r in results),
        "duplicates": sum(r.duplicate_batch for r in results),
    }
    if recovered:
        summary["recovered"] = recovered
    return summary


def _batch_from_raw(raw: bytes):
    """The batch of a message as kombu's Redis transport stores it (a JSON envelope with the
    body in base64), or None for anything undecodable (ingest then counts it malformed)."""
    try:
        envelope = json.loads(raw)
        body = envelope["body"]
        if envelope.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        decoded = kombu_loads(
            body,
            envelope.get("content-type"),
            envelope.get("content-encoding", "utf-8"),
            accept=ACCEPTED_CONTENT,
        )
        headers = envelope.get("headers") or {}
    except Exception:  # noqa: BLE001 - anything a broken or hostile sender can put there
        logger.warning("undecodable message on the telemetry queue")
        return None
    return _batch_from_body(headers, decoded)


def _batch_from_body(headers: dict, body):
    """The batch argument of a `telemetry.ingest` task message (Celery protocol 2), or the
    message body itself."""
    if headers.get("task") == "telemetry.ingest" and isinstance(body, list) and body:
        args = body[0]
        return args[0] if isinstance(args, list) and args else None
    return body


def _drain_with_kombu(max_batches: int, max_samples: int, *, started=None) -> dict[str, int]:
    """Brokers other than Redis: take messages through kombu (within the same limits), ack
    them after the commit, requeue them all if the database is lost."""
    from portal.celery import app

    messages, batches = [], []
    samples, emptied = 0, False
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(settings.TELEMETRY_QUEUE, no_ack=False)
        try:
            while len(messages) < max_batches and samples < max_samples:
                try:
                    message = queue.get(block=False)
                except Empty:
                    emptied = True
                    break
                messages.append(message)
                try:
                    batches.append(_batch_from_body(message.headers, message.decode()))
                except Exception:  # noqa: BLE001 - undecodable: counted malformed by ingest
                    batches.append(None)
                samples += _samples_in(batches[-1])
            results = telemetry_ingest_many(batches=batches) if batches else []
        except Exception:
            for message in messages:
                message.requeue()
            raise
        for message in messages:
            message.ack()
        queue.close()
    drain_heartbeat_record(
        started=started or timezone.now(), finished=timezone.now(), backlog=not emptied
    )
    return _summary(results)
