"""The command driver runs a site's real scripts: success, a failing exit with its stderr, a
script that hangs past the timeout, a state script's answer, and a missing setting."""

import stat

import pytest

from apps.power.drivers import driver_for
from apps.power.drivers.base import PowerDriverError
from apps.power.drivers.command import CommandDriver
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def _script(folder, name: str, body: str) -> str:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def node():
    return NodeFactory(hostname="gpu-07", labels={"power_driver": "command"})


def test_off_on_and_state_run_the_scripts_with_the_node_name(settings, tmp_path, node):
    log = tmp_path / "log"
    settings.POWER_COMMAND_OFF = _script(tmp_path, "off", f'echo "off $1" >> {log}\n') + " {node}"
    settings.POWER_COMMAND_ON = _script(tmp_path, "on", f'echo "on $1 $2" >> {log}\n') + (
        " --host={node} 'two words'"
    )
    settings.POWER_COMMAND_STATE = _script(tmp_path, "state", "echo ' ON'\n") + " {node}"
    driver = driver_for(node)
    assert isinstance(driver, CommandDriver)
    driver.power_off(node)
    driver.power_on(node)
    assert log.read_text().splitlines() == ["off gpu-07", "on --host=gpu-07 two words"]
    assert driver.read_state(node) == "on"


def test_a_state_script_that_prints_something_else_reads_unknown(settings, tmp_path, node):
    settings.POWER_COMMAND_STATE = _script(tmp_path, "state", "echo 'chassis power: who knows'\n")
    assert CommandDriver().read_state(node) == "unknown"


def test_a_failing_script_raises_with_its_status_and_stderr_tail(settings, tmp_path, node):
    settings.POWER_COMMAND_OFF = _script(
        tmp_path, "off", "echo 'noise' >&2\necho 'BMC at 10.0.0.7 refused the login' >&2\nexit 3\n"
    )
    with pytest.raises(PowerDriverError) as failed:
        CommandDriver().power_off(node)
    assert "exited with status 3" in str(failed.value)
    assert str(failed.value).endswith("BMC at 10.0.0.7 refused the login")
    assert "gpu-07" in str(failed.value)


def test_a_script_that_hangs_is_stopped_at_the_timeout(settings, tmp_path, node):
    settings.POWER_COMMAND_TIMEOUT_SECONDS = 1
    settings.POWER_COMMAND_ON = _script(tmp_path, "on", "sleep 30\n")
    with pytest.raises(PowerDriverError) as failed:
        CommandDriver().power_on(node)
    assert "did not finish within 1 s" in str(failed.value)


def test_no_shell_is_involved(settings, tmp_path, node):
    marker = tmp_path / "marker"
    settings.POWER_COMMAND_OFF = f"/bin/echo {{node}}; touch {marker}"
    CommandDriver().power_off(node)  # echo prints the words; nothing else runs
    assert not marker.exists()


def test_a_missing_setting_or_program_is_a_clear_error(settings, tmp_path, node):
    settings.POWER_COMMAND_STATE = ""
    with pytest.raises(PowerDriverError, match="POWER_COMMAND_STATE is not set"):
        CommandDriver().read_state(node)
    settings.POWER_COMMAND_OFF = str(tmp_path / "nowhere") + " {node}"
    with pytest.raises(PowerDriverError, match="cannot run"):
        CommandDriver().power_off(node)
