"""A node taken out of service by the scheduler that runs its work (an integration), and what
integrations say about nodes on the fleet page, both through hooks: fleet imports no
integration."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.fleet.choices import NodeStatus
from apps.fleet.services import node_set_scheduler_drained
from portal import hooks

pytestmark = pytest.mark.django_db

STATE_CHANGES: list[dict] = []


def record_state_change(**kwargs):
    STATE_CHANGES.append(kwargs)


def notes_for_nodes(*, nodes, **_):
    return {node.hostname: f"Scheduler: busy ({node.hostname})" for node in nodes[:1]}


@pytest.fixture
def with_hooks(settings):
    STATE_CHANGES.clear()
    settings.PORTAL_HOOKS = {
        **settings.PORTAL_HOOKS,
        "node.state_changed": [f"{__name__}.record_state_change"],
        "fleet.node_notes": [f"{__name__}.notes_for_nodes"],
    }
    hooks.reset_cache()
    yield
    hooks.reset_cache()


def test_scheduler_drain_and_undrain_are_audited_as_the_system_and_not_echoed(with_hooks, fleet):
    node = fleet[0]
    assert node_set_scheduler_drained(
        node=node, drained=True, scheduler="Slurm", reason="drained (bad_dimm)"
    )
    node.refresh_from_db()
    assert node.status == NodeStatus.DRAINED
    event = AuditEvent.objects.get(action="node.drain")
    assert (event.actor, event.reason) == (None, "Slurm: drained (bad_dimm)")
    # The scheduler is the source: it is not told about its own drain.
    assert STATE_CHANGES == []
    assert not node_set_scheduler_drained(node=node, drained=True, scheduler="Slurm", reason="x")
    assert AuditEvent.objects.count() == 1

    assert node_set_scheduler_drained(node=node, drained=False, scheduler="Slurm", reason="idle")
    node.refresh_from_db()
    assert node.status == NodeStatus.UP
    assert AuditEvent.objects.get(action="node.undrain").actor is None
    assert STATE_CHANGES == []


def test_a_retired_node_is_not_drained_by_the_scheduler(with_hooks, fleet):
    node = fleet[0]
    node.status = NodeStatus.RETIRED
    node.save()
    assert not node_set_scheduler_drained(node=node, drained=True, scheduler="Slurm", reason="")
    node.refresh_from_db()
    assert node.status == NodeStatus.RETIRED
    assert not AuditEvent.objects.exists()


def test_fleet_page_shows_what_a_node_notes_subscriber_says(settings, platform_admin, fleet):
    client = Client()
    client.force_login(platform_admin)
    assert b"node-scheduler-note" not in client.get("/fleet/").content
    settings.PORTAL_HOOKS = {
        **settings.PORTAL_HOOKS,
        "fleet.node_notes": [f"{__name__}.notes_for_nodes"],
    }
    hooks.reset_cache()
    try:
        page = client.get("/fleet/").content.decode()
    finally:
        hooks.reset_cache()
    first = sorted(node.hostname for node in fleet)[0]
    assert f'data-testid="node-scheduler-note">Scheduler: busy ({first})<' in page
    assert page.count('data-testid="node-scheduler-note"') == 1
