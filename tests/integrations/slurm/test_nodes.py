"""Draining a node in the portal drains it in Slurm, and back; Slurm's own drains are reported."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from apps.audit.models import AuditEvent
from apps.fleet.choices import NodeStatus
from apps.fleet.services import node_change_state
from apps.integrations.slurm import services, tasks
from apps.integrations.slurm.models import SlurmNode
from tests.factories import PlatformAdminFactory
from tests.integrations.slurm.conftest import slurm_out, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def node_state(slurm) -> tuple[str, str]:
    out = slurm_out(slurm.cluster, "sinfo", "-h", "-N", "-o", "%T|%E").strip()
    state, _, reason = out.partition("|")
    return state, reason


def test_portal_drain_drains_the_node_in_slurm_and_undrain_resumes_it(slurm):
    admin = PlatformAdminFactory(username="ops")
    node_change_state(node=slurm.node, operation="drain", actor=admin, reason="firmware update")
    state, reason = node_state(slurm)
    assert state == "drained"
    assert reason == "portal: drain by ops: firmware update"

    node_change_state(node=slurm.node, operation="undrain", actor=admin)
    wait_for(lambda: node_state(slurm)[0] == "idle", what="Slurm to resume the node")


def test_slurm_check_reports_nodes_slurm_took_out_of_service(slurm):
    slurm_out(
        slurm.cluster,
        "scontrol",
        "update",
        f"NodeName={slurm.cluster.hostname}",
        "State=DRAIN",
        "Reason=bad_dimm",
    )
    out = StringIO()
    call_command("slurm_check", stdout=out)
    assert f"info node {slurm.cluster.hostname} is out of service in Slurm: drained (bad_dimm)" in (
        out.getvalue()
    )
    slurm_out(
        slurm.cluster, "scontrol", "update", f"NodeName={slurm.cluster.hostname}", "State=RESUME"
    )


def scontrol_state(slurm, state: str, reason: str = "") -> None:
    args = [f"NodeName={slurm.cluster.hostname}", f"State={state}"]
    if reason:
        args.append(f"Reason={reason}")
    slurm_out(slurm.cluster, "scontrol", "update", *args)


def node_events(node):
    return AuditEvent.objects.filter(action__startswith="node.", object_id=str(node.pk))


def test_drain_made_in_slurm_drains_the_portal_node_and_resume_undrains_it(slurm):
    node = slurm.node
    scontrol_state(slurm, "DRAIN", "bad_dimm")
    wait_for(lambda: node_state(slurm)[0] == "drained", what="Slurm to drain the node")

    assert tasks.nodes() == {"drained": [node.hostname], "undrained": []}
    node.refresh_from_db()
    assert node.status == NodeStatus.DRAINED
    event = node_events(node).get(action="node.drain")
    assert event.actor is None
    assert "bad_dimm" in event.reason and event.reason.startswith("Slurm")
    assert event.after == {"status": NodeStatus.DRAINED}
    # Slurm was not told back: its reason is still its operator's, not a portal drain.
    assert node_state(slurm) == ("drained", "bad_dimm")

    # Running it again changes nothing.
    events = AuditEvent.objects.count()
    assert services.nodes_sync() == {"drained": [], "undrained": []}
    assert AuditEvent.objects.count() == events

    scontrol_state(slurm, "RESUME")
    wait_for(lambda: not services.out_of_service(node_state(slurm)[0]), what="Slurm to resume")
    assert services.nodes_sync() == {"drained": [], "undrained": [node.hostname]}
    node.refresh_from_db()
    assert node.status == NodeStatus.UP
    undrain = node_events(node).get(action="node.undrain")
    assert undrain.actor is None and undrain.reason.startswith("Slurm")
    assert services.nodes_sync() == {"drained": [], "undrained": []}
    assert node_events(node).count() == 2
    assert SlurmNode.objects.get(hostname=node.hostname).drained_in_portal is False


def test_a_node_a_portal_admin_drained_stays_drained_when_slurm_resumes_it(slurm):
    node = slurm.node
    admin = PlatformAdminFactory(username="ops")
    node_change_state(node=node, operation="drain", actor=admin, reason="firmware update")
    # Slurm shows the portal's own drain: not mirrored back.
    assert services.nodes_sync() == {"drained": [], "undrained": []}
    # A Slurm operator resumes the node; the admin's drain still holds in the portal.
    scontrol_state(slurm, "RESUME")
    wait_for(lambda: not services.out_of_service(node_state(slurm)[0]), what="Slurm to resume")
    assert services.nodes_sync() == {"drained": [], "undrained": []}
    node.refresh_from_db()
    assert node.status == NodeStatus.DRAINED
    assert [e.actor for e in node_events(node)] == [admin]


def test_fleet_page_shows_slurms_state_and_reason_from_the_last_reading(slurm):
    client = Client()
    client.force_login(PlatformAdminFactory())
    assert 'data-testid="node-scheduler-note"' not in client.get("/fleet/").content.decode()

    scontrol_state(slurm, "DRAIN", "fan_failure")
    wait_for(lambda: node_state(slurm)[0] == "drained", what="Slurm to drain the node")
    services.nodes_sync()
    page = client.get("/fleet/").content.decode()
    section = page[page.index(f'data-node="{slurm.cluster.hostname}"') :]
    note = re.search(r'data-testid="node-scheduler-note">([^<]*)<', section).group(1)
    assert note == "Slurm: drained (fan_failure)"

    # The page reads the stored reading, not Slurm: a change in Slurm shows after the next sync.
    scontrol_state(slurm, "RESUME")
    wait_for(lambda: node_state(slurm)[0] == "idle", what="Slurm to resume")
    assert "Slurm: drained (fan_failure)" in client.get("/fleet/").content.decode()
    services.nodes_sync()
    assert "Slurm: idle<" in client.get("/fleet/").content.decode()


@pytest.mark.parametrize(
    ("state", "out"),
    [
        ("drained", True),
        ("draining", True),
        ("down*", True),
        ("mixed+drain", True),
        ("idle", False),
        ("mixed", False),
        ("allocated*", False),
        ("reserved", False),
    ],
)
def test_out_of_service_reads_slurms_state_words(state, out):
    assert services.out_of_service(state) is out
