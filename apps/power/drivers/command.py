"""Power through a site's own scripts, like Slurm's SuspendProgram/ResumeProgram: IPMI
(`ipmitool ... chassis power off`), a cloud CLI, a PDU. Settings `POWER_COMMAND_OFF`,
`POWER_COMMAND_ON` and `POWER_COMMAND_STATE` are command lines with a `{node}` placeholder for the
host name; they run without a shell (split like a shell would, no expansion), within
`POWER_COMMAND_TIMEOUT_SECONDS`. The state script prints `on` or `off` (anything else reads as
unknown)."""

import shlex
import subprocess

from django.conf import settings

from apps.power.drivers.base import HardwareState, PowerDriverError

STDERR_TAIL = 500  # characters of a failed script's stderr shown to admins


class CommandDriver:
    name = "command"

    def power_off(self, node) -> None:
        self._run("POWER_COMMAND_OFF", node)

    def power_on(self, node) -> None:
        self._run("POWER_COMMAND_ON", node)

    def read_state(self, node) -> HardwareState:
        answer = self._run("POWER_COMMAND_STATE", node).strip().lower()
        return answer if answer in ("on", "off") else "unknown"

    def _run(self, setting: str, node) -> str:
        template = getattr(settings, setting, "")
        if not template.strip():
            raise PowerDriverError(f"Node {node.hostname}: {setting} is not set.")
        argv = [part.replace("{node}", node.hostname) for part in shlex.split(template)]
        timeout = settings.POWER_COMMAND_TIMEOUT_SECONDS
        try:
            done = subprocess.run(  # noqa: S603 - an admin's configured command, no shell
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise PowerDriverError(
                f"Node {node.hostname}: {argv[0]} did not finish within {timeout} s."
            ) from None
        except OSError as error:
            raise PowerDriverError(f"Node {node.hostname}: cannot run {argv[0]}: {error}") from None
        if done.returncode != 0:
            tail = done.stderr.strip()[-STDERR_TAIL:]
            raise PowerDriverError(
                f"Node {node.hostname}: {argv[0]} exited with status {done.returncode}"
                + (f": {tail}" if tail else ".")
            )
        return done.stdout
