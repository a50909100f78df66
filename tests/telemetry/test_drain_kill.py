"""A drain worker SIGKILLed mid-drain loses no batch and stores none twice: every message is at
every instant in the queue or in a registered processing list that the next drain requeues."""

import random
import signal
import subprocess
import sys
import time

import pytest
import redis
from django.conf import settings

from apps.fleet.models import Gpu
from apps.telemetry.drain import processing_registry, recover_abandoned, telemetry_drain
from apps.telemetry.models import GpuSample, IngestBatch
from portal.celery import app
from tests.processes import ROOT, portal_environment
from tests.telemetry.conftest import batch, sample

BATCHES_PER_NODE = 600

DRAIN_FOREVER = """
import django
django.setup()
from apps.telemetry.drain import telemetry_drain
print("draining", flush=True)
while True:
    telemetry_drain(max_batches=40)
"""


def _drain_process() -> subprocess.Popen:
    env = portal_environment(LOG_LEVEL="ERROR")
    process = subprocess.Popen(
        [sys.executable, "-c", DRAIN_FOREVER],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "draining", process.stderr.read()[-2000:]
    return process


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sigkill_during_drains_stores_every_batch_exactly_once(fleet, now):
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queue, registry = settings.TELEMETRY_QUEUE, processing_registry()
    client.delete(queue, registry)
    hosts = {
        h: sorted(Gpu.objects.filter(node__hostname=h).values_list("uuid", flat=True))
        for h in ("h100-a", "h100-b")
    }
    start = now.timestamp() - 3600
    for seq in range(BATCHES_PER_NODE):
        for host, uuids in hosts.items():
            app.send_task(
                "telemetry.ingest",
                args=[batch(seq, [sample(u, start + seq * 5) for u in uuids], node=host)],
                queue=queue,
            )
    total = BATCHES_PER_NODE * len(hosts)
    assert client.llen(queue) == total

    interrupted = 0
    rng = random.Random(7)
    for _ in range(3):
        queued = client.llen(queue)
        process = _drain_process()
        # Kill right after the drain took its first messages: a fixed delay either lands before
        # it started (slow start-up) or after it emptied the queue (fast database).
        deadline = time.monotonic() + 30
        while client.llen(queue) >= queued and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.03))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        held = [client.llen(name) for name in client.zrange(registry, 0, -1)]
        interrupted += sum(1 for n in held if n)
    # The kills must have landed inside drains, or this test proves nothing.
    assert interrupted >= 1

    assert recover_abandoned(client, older_than=0) >= 1
    while telemetry_drain(max_batches=500)["batches"]:
        pass

    assert IngestBatch.objects.count() == total
    assert GpuSample.objects.count() == total * 8
    assert client.llen(queue) == 0 and client.zcard(registry) == 0
