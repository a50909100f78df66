"""Simulated node agents (separate processes) -> real Redis -> portal Celery worker ->
PostgreSQL: registration, samples, rollups, idle intervals, and a killed node going
unreachable and coming back."""

import os
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from apps.fleet.choices import NodeStatus
from apps.fleet.models import Gpu, Node
from apps.telemetry.choices import IdleKind
from apps.telemetry.drain import telemetry_drain
from apps.telemetry.idle import idle_intervals_update
from apps.telemetry.models import GpuMinuteRollup, GpuSample, IdleInterval
from apps.telemetry.rollups import rollup_minutes
from apps.telemetry.tasks import poll_fleet
from tests.processes import spawn_agent, stop, wait_for

ROOT = Path(__file__).resolve().parents[2]


def _spawn_agent(hostname: str) -> subprocess.Popen:
    return spawn_agent(hostname, profile="busy", stderr=subprocess.PIPE)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_agents_feed_the_portal_end_to_end(settings):
    from celery.contrib.testing.worker import start_worker

    from portal.celery import app

    settings.TELEMETRY_POLL_SECONDS = 1
    first, second = f"e2e-{os.getpid()}-a", f"e2e-{os.getpid()}-b"
    app.control.purge()
    agents = {}
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        try:
            agents = {name: _spawn_agent(name) for name in (first, second)}
            assert wait_for(lambda: Gpu.objects.filter(node__hostname__in=agents).count() == 8), (
                "agents did not register: " + agents[first].stderr.read()
                if agents[first].poll()
                else ""
            )
            assert wait_for(
                lambda: GpuSample.objects.filter(gpu__node__hostname=second).count() >= 8,
                poll=lambda: (poll_fleet(), telemetry_drain()),
            )
            sample = GpuSample.objects.filter(gpu__node__hostname=first).latest("ts")
            assert sample.util_gpu is not None and sample.util_gpu > 50  # "busy" profile
            assert sample.power_w > 100 and sample.energy_mj > 0

            now = timezone.now()
            rollup_minutes(start=now - timedelta(minutes=2), end=now + timedelta(minutes=1))
            assert GpuMinuteRollup.objects.filter(gpu__node__hostname=first).exists()
            idle_intervals_update(now=now + timedelta(minutes=1))
            assert IdleInterval.objects.filter(kind=IdleKind.UNALLOCATED).count() == 8

            stop(agents.pop(second))
            from apps.telemetry.services import nodes_mark_unreachable

            assert wait_for(
                lambda: Node.objects.get(hostname=second).status == NodeStatus.UNREACHABLE,
                poll=lambda: (poll_fleet(), telemetry_drain(), nodes_mark_unreachable()),
                timeout=30,
            )
            assert Node.objects.get(hostname=first).status == NodeStatus.UP
            agents[second] = _spawn_agent(second)
            assert wait_for(
                lambda: Node.objects.get(hostname=second).status == NodeStatus.UP,
                poll=lambda: (poll_fleet(), telemetry_drain()),
            )
        finally:
            for process in agents.values():
                stop(process)
