"""The node agent runs as its own process, with only a broker URL, and serves its node queue."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def _agent_env(**extra) -> dict:
    secrets = ("DATABASE_URL", "TEST_DATABASE_URL", "DJANGO_SETTINGS_MODULE", "PG")
    env = {k: v for k, v in os.environ.items() if not k.startswith(secrets)}
    env.pop("CELERY_BROKER_URL", None)
    env.pop("REDIS_URL", None)
    return {**env, **extra}


@pytest.mark.slow
def test_agent_starts_without_database_settings_and_serves_its_node_queue():
    broker = settings.CELERY_BROKER_URL
    hostname = f"ci-node-{os.getpid()}"
    agent = subprocess.Popen(
        [sys.executable, "-m", "workers.agent", "--backend", "simulated", "--hostname", hostname],
        cwd=ROOT,
        env=_agent_env(CELERY_BROKER_URL=broker),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    client = Celery(broker=broker)
    try:
        replies = []
        deadline = time.monotonic() + 60
        while not replies and time.monotonic() < deadline:
            assert agent.poll() is None, agent.stdout.read()
            replies = client.control.ping(destination=[f"agent@{hostname}"], timeout=1)
        assert replies == [{f"agent@{hostname}": {"ok": "pong"}}]
        queues = client.control.inspect(
            destination=[f"agent@{hostname}"], timeout=5
        ).active_queues()
        assert [q["name"] for q in queues[f"agent@{hostname}"]] == [f"node.{hostname}"]
        registered = client.control.inspect(
            destination=[f"agent@{hostname}"], timeout=5
        ).registered()
        assert "agent.ping" in registered[f"agent@{hostname}"]
        agent_conf = client.control.inspect(destination=[f"agent@{hostname}"], timeout=5).conf()
        assert "DATABASES" not in str(agent_conf[f"agent@{hostname}"])
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=20)
        except subprocess.TimeoutExpired:
            agent.kill()
        client.close()


def test_agent_refuses_to_start_without_a_broker_url():
    result = subprocess.run(
        [sys.executable, "-m", "workers.agent", "--backend", "simulated"],
        cwd=ROOT,
        env=_agent_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "needs CELERY_BROKER_URL" in result.stderr
