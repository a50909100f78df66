"""Slurm's own power saving as the portal's power driver: against the real test cluster, whose
SuspendProgram stops the node's slurmd and whose ResumeProgram boots it again."""

import subprocess

import pytest

from apps.fleet.models import Node
from apps.integrations.slurm.client import SlurmError
from apps.integrations.slurm.power import SlurmPowerDriver, hardware_state
from apps.power.drivers import driver_for
from apps.power.drivers.base import PowerDriverError
from tests.integrations.slurm.conftest import _unavailable, slurm_out, wait_for

# Slurm marks a node powered down SuspendTimeout after asking (its power-saving thread looks
# every few seconds); a resumed node is back once its slurmd has booted and registered.
POWER_CHANGE_TIMEOUT = 90


@pytest.mark.parametrize(
    ("slurm_state", "expected"),
    [
        ("IDLE", "on"),
        ("MIXED", "on"),
        ("ALLOCATED+DRAIN", "on"),
        ("IDLE+POWER_DOWN", "unknown"),
        ("IDLE+POWERING_DOWN", "unknown"),
        ("IDLE+POWERED_DOWN", "off"),
        ("IDLE+POWER_UP+POWERED_DOWN", "unknown"),
        ("IDLE+NOT_RESPONDING+POWERING_UP", "unknown"),
        ("DOWN+POWERED_DOWN+NOT_RESPONDING", "off"),
        ("DOWN+NOT_RESPONDING", "unknown"),
    ],
)
def test_slurm_states_map_to_on_off_or_unknown(slurm_state, expected):
    assert hardware_state(slurm_state) == expected


def test_a_missing_scontrol_is_reported_with_the_setting(settings):
    settings.SLURM_BIN_DIR = "/nonexistent/slurm/bin"
    with pytest.raises(PowerDriverError) as error:
        SlurmPowerDriver().power_off(Node(hostname="gpu-07"))
    assert str(error.value).startswith("Node gpu-07: could not read its state from Slurm:")
    assert "SLURM_BIN_DIR=/nonexistent/slurm/bin" in str(error.value)


def _slurm_state(slurm) -> str:
    out = slurm_out(slurm.cluster, "scontrol", "-o", "show", "node", slurm.cluster.hostname)
    return next(p for p in out.split() if p.startswith("State=")).removeprefix("State=")


@pytest.fixture
def powered(slurm):
    """The test cluster, its node powered up again afterwards whatever the test left."""
    probe = subprocess.run(["unshare", "--time", "--boottime", "0", "true"], capture_output=True)
    if probe.returncode != 0:
        _unavailable(
            "the test cluster's ResumeProgram needs time namespaces (unshare --time): "
            + probe.stderr.decode(errors="replace").strip()
        )
    yield slurm
    if _slurm_state(slurm) != "IDLE":
        host = slurm.cluster.hostname
        if "POWERED_DOWN" in _slurm_state(slurm):
            slurm_out(slurm.cluster, "scontrol", "update", f"NodeName={host}", "State=POWER_UP")
        wait_for(
            lambda: hardware_state(_slurm_state(slurm)) == "on",
            timeout=POWER_CHANGE_TIMEOUT,
            what="the node to come back after the test",
        )
        slurm_out(slurm.cluster, "scontrol", "update", f"NodeName={host}", "State=RESUME")


@pytest.mark.slurm
@pytest.mark.django_db
def test_slurm_powers_the_node_down_and_up_and_the_driver_reads_it_back(powered):
    node = powered.node
    node.labels = {"power_driver": "slurm"}
    driver = driver_for(node)
    assert isinstance(driver, SlurmPowerDriver)
    assert driver.read_state(node) == "on"

    driver.power_off(node)
    assert "POWER" in _slurm_state(powered)  # Slurm took the request at once
    wait_for(lambda: driver.read_state(node) == "off", timeout=POWER_CHANGE_TIMEOUT, what="off")
    assert "POWERED_DOWN" in _slurm_state(powered)
    driver.power_off(node)  # already off: nothing asked twice
    assert powered.cluster.power_log.read_text().splitlines() == [
        f"suspend {powered.cluster.hostname}"
    ]

    driver.power_on(node)
    wait_for(lambda: driver.read_state(node) == "on", timeout=POWER_CHANGE_TIMEOUT, what="on")
    assert powered.cluster.power_log.read_text().splitlines()[-1] == (
        f"resume {powered.cluster.hostname}"
    )
    # Back in service: Slurm runs jobs on it again.
    wait_for(
        lambda: slurm_out(powered.cluster, "sinfo", "-h", "-N", "-o", "%T").strip() == "idle",
        what="the node to be idle",
    )


@pytest.mark.slurm
@pytest.mark.django_db
def test_a_node_slurm_does_not_know_is_named_in_the_error(slurm):
    stranger = Node(hostname="gpu-not-in-slurm", labels={"power_driver": "slurm"})
    for ask in (SlurmPowerDriver().read_state, SlurmPowerDriver().power_on):
        with pytest.raises(PowerDriverError) as error:
            ask(stranger)
        assert str(error.value).startswith("Node gpu-not-in-slurm: Slurm does not know this node")
        assert "hostname" in str(error.value)


def test_a_cluster_without_power_saving_gets_a_hint_at_slurm_conf():
    refusal = SlurmError(
        "scontrol failed: slurm_update error: Invalid node state specified",
        reason="slurm_update error: Invalid node state specified",
    )
    error = SlurmPowerDriver._refused(Node(hostname="gpu-07"), "power it down", refusal)
    assert str(error).startswith(
        "Node gpu-07: could not power it down: slurm_update error: Invalid node state specified."
    )
    assert "SuspendProgram, ResumeProgram" in str(error) and "INFINITE" in str(error)
