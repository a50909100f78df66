"""Agent and portal speak the protocol of workers.protocol: each side handles every message and
field it defines, so neither can drift from the other."""

import pytest
from django.apps import apps as django_apps

from apps.telemetry import ingest
from portal.celery import app as portal_app
from workers import protocol
from workers.agent.app import create_app


def test_every_measured_field_is_a_sample_key_and_a_stored_column():
    stored = {f.column for f in django_apps.get_model("telemetry", "GpuSample")._meta.fields}
    assert set(protocol.SAMPLE_RANGES) <= set(protocol.SAMPLE_KEYS)
    assert set(protocol.SAMPLE_RANGES) <= stored
    assert set(protocol.SAMPLE_RANGES) >= protocol.INTEGER_FIELDS
    assert ingest.SAMPLE_COLUMNS[2:] == tuple(protocol.SAMPLE_RANGES)


def test_the_portal_understands_every_health_the_agent_sends():
    assert set(ingest.HEALTH_FROM_AGENT) == set(protocol.HEALTH_VALUES)


def test_the_portal_runs_every_task_agents_send():
    portal_app.loader.import_default_modules()
    registered = set(portal_app.tasks)
    for name in (protocol.INGEST_TASK, protocol.REGISTER_NODE_TASK, protocol.JOB_REPORT_TASK):
        assert name in registered, name


def test_the_agent_runs_every_task_the_portal_sends(monkeypatch, tmp_path):
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
    monkeypatch.setenv("AGENT_JOB_DIR", str(tmp_path))
    agent_app = create_app(hostname="gpu-protocol-01", backend="simulated")
    names = (protocol.LAUNCH_TASK, protocol.KILL_TASK, protocol.PING_TASK, protocol.POLL_TASK)
    for name in names:
        assert name in agent_app.tasks, name
    assert agent_app.conf.task_default_queue == protocol.node_queue("gpu-protocol-01")


@pytest.mark.parametrize("hostname", ["gpu-01", "node.with.dots", "x"])
def test_a_node_queue_names_its_node(hostname):
    assert protocol.hostname_of_queue(protocol.node_queue(hostname)) == hostname
