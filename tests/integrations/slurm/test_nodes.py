"""Draining a node in the portal drains it in Slurm, and back; Slurm's own drains are reported."""

from io import StringIO

import pytest
from django.core.management import call_command

from apps.fleet.services import node_change_state
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
