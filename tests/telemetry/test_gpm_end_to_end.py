"""Simulated GPM end to end: node agents (in this process, on a fake clock) send their batches
through the real Redis broker; the portal drains them into PostgreSQL, rolls them up and judges
idleness on SM activity where the GPUs report it (H100), on utilization where not (A100)."""

import json
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from apps.fleet.models import Gpu
from apps.fleet.services import node_register
from apps.telemetry.choices import ActivitySignal
from apps.telemetry.drain import telemetry_drain
from apps.telemetry.idle import idle_bookings_check
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup, GpuSample, IdleWarning
from apps.telemetry.rollups import rollup_hours, rollup_minutes
from portal.celery import app
from tests.factories import make_booking
from workers.agent.agent import Agent
from workers.agent.backends import make_reader

MINUTES = 40


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _send(task_name: str, payload: dict) -> None:
    """What the agent app does: telemetry to its queue on the broker (JSON, like Celery)."""
    assert task_name == "telemetry.ingest"
    app.send_task(task_name, args=[payload], queue=settings.TELEMETRY_QUEUE, retry=False)


def _agent(hostname: str, model: str, clock: FakeClock, **options) -> Agent:
    reader = make_reader("simulated", hostname, gpu_count=2, model=model, clock=clock, **options)
    agent = Agent(hostname=hostname, backend="simulated", reader=reader, send=_send)
    node_register(inventory=json.loads(json.dumps(agent.inventory())))
    return agent


@pytest.mark.django_db(transaction=True)
def test_simulated_gpm_from_agent_to_idle_decision(team, member, settings):
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(settings.TELEMETRY_QUEUE)
    now = timezone.now().replace(second=0, microsecond=0)
    start = now - timedelta(minutes=MINUTES)
    clock = FakeClock(start.timestamp())
    hopper = _agent("gpm-h100", "H100-SXM-80GB", clock, mig_gpus=1)
    ampere = _agent("gpm-a100", "A100-SXM-80GB", clock)
    h_mig, h_whole = hopper.reader.nvml.gpu_uuids  # the first is in MIG mode
    a_first, _ = ampere.reader.nvml.gpu_uuids
    mig_first, mig_second = hopper.reader.nvml.mig_uuids(h_mig)
    # A job of tiny kernels: utilization 100 %, SM activity 1 %. On the A100 the same job
    # can only be seen as 100 % utilization.
    hopper.reader.nvml.set_load(h_whole, 100, sm_active=1.0)
    ampere.reader.nvml.set_load(a_first, 100)
    hopper.reader.nvml.set_load(mig_first, 70, sm_active=50.0)
    hopper.reader.nvml.set_load(mig_second, 0)

    gpus = {g.uuid: g for g in Gpu.objects.filter(node__hostname__in=["gpm-h100", "gpm-a100"])}
    held_from = start - timedelta(minutes=20)
    tiny = make_booking(team, member, [gpus[h_whole]], held_from, now + timedelta(hours=2))
    legacy = make_booking(team, member, [gpus[a_first]], held_from, now + timedelta(hours=2))

    for _ in range(MINUTES * 4):
        hopper.poll()
        ampere.poll()
        clock.t += 15
    assert client.llen(settings.TELEMETRY_QUEUE) == 2 * MINUTES * 4
    while telemetry_drain(max_batches=100)["batches"]:
        pass
    assert GpuSample.objects.count() == (3 + 1 + 2) * MINUTES * 4  # 2 + 2 GPUs, 2 MIG devices

    rollup_minutes(start=start, end=now)
    rollup_hours(start=start, end=now)
    minute = {
        r.gpu.uuid: r
        for r in GpuMinuteRollup.objects.filter(bucket=now - timedelta(minutes=5)).select_related(
            "gpu"
        )
    }
    assert minute[h_whole].util_avg > 95 and minute[h_whole].sm_active_avg == pytest.approx(1)
    assert minute[h_whole].busy_seconds == 0  # by SM activity
    assert minute[a_first].sm_active_avg is None and minute[a_first].busy_seconds == 60
    assert minute[mig_first].sm_active_avg == pytest.approx(50)  # per MIG instance
    assert minute[mig_second].sm_active_avg == pytest.approx(0)
    assert minute[h_mig].sm_active_avg == pytest.approx(25)  # the board: both instances
    assert minute[h_whole].tensor_active_avg == pytest.approx(0.7)
    assert minute[h_whole].activity_signal == ActivitySignal.SM_ACTIVE
    assert minute[a_first].activity_signal == ActivitySignal.UTIL
    hours = GpuHourRollup.objects.filter(gpu=gpus[h_whole])
    assert hours.exists() and all(h.sm_active_avg == pytest.approx(1) for h in hours)

    result = idle_bookings_check(now=now)
    assert result["warned"] == 1
    warning = IdleWarning.objects.get()
    assert warning.reservation_id == tiny.pk and "SM activity" in warning.reason
    assert not IdleWarning.objects.filter(reservation=legacy).exists()
