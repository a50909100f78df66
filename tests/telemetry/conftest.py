import pytest
from django.conf import settings
from django.utils import timezone

from apps.fleet.models import Gpu
from portal.celery import app


@pytest.fixture
def node_gpus(fleet):
    """The 8 GPUs of node h100-a, by uuid."""
    return {g.uuid: g for g in Gpu.objects.filter(node__hostname="h100-a")}


def sample(uuid, ts, util=50, **extra):
    return {
        "uuid": uuid,
        "ts": ts,
        "util_gpu": util,
        "util_mem": 10,
        "mem_used_mib": 1000,
        "power_w": 300.0,
        "temp_c": 55,
        "energy_mj": extra.pop("energy_mj", 1_000_000),
        "health": "healthy",
        **extra,
    }


def batch(seq, samples, node="h100-a"):
    return {"node": node, "seq": seq, "samples": samples}


@pytest.fixture
def now():
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def telemetry_queue():
    """Send like an agent does; leave the queue empty afterwards."""
    with app.connection_for_write() as conn:
        conn.SimpleQueue(settings.TELEMETRY_QUEUE).clear()

    def send(payload):
        app.send_task("telemetry.ingest", args=[payload], queue=settings.TELEMETRY_QUEUE)

    yield send
    with app.connection_for_write() as conn:
        conn.SimpleQueue(settings.TELEMETRY_QUEUE).clear()
