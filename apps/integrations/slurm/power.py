"""Power a node through Slurm's own power saving, for a fleet whose nodes Slurm runs.

Slurm powers nodes with the site's `SuspendProgram` / `ResumeProgram` (IPMI, Redfish, a
cloud CLI); the portal only asks Slurm, so Slurm never finds a node gone that it believes up,
and a job Slurm places on a powered-down node still wakes it. Slurm must have power saving on:
`SuspendProgram`, `ResumeProgram` and a `SuspendTime` other than INFINITE (a long one, such as a
year, leaves the decision to the portal), plus `SuspendTimeout` and `ResumeTimeout`.

- Power off: `scontrol update NodeName=<node> State=POWER_DOWN` (Slurm runs SuspendProgram).
- Power on: `scontrol update NodeName=<node> State=POWER_UP` (Slurm runs ResumeProgram and takes
  the node back once its slurmd registers after booting).

The form works on Slurm 22.05 and later (`scontrol power down|up`, new in 23.02, does the same).
The Slurm node is the portal node's hostname, as everywhere in this integration.

Slurm's node state flags map to the portal's hardware state (`scontrol show node`):

- `POWERED_DOWN` -> "off" (also after a failed resume, when Slurm marks the node DOWN and
  powers it down again);
- `POWER_DOWN` or `POWER_UP` (asked, not started), `POWERING_DOWN`, `POWERING_UP` -> "unknown":
  on the way, neither usable nor safely off;
- no power flag -> "on", unless the node is DOWN or NOT_RESPONDING ("unknown": Slurm cannot
  tell whether it is powered).
"""

from apps.integrations.slurm.client import SlurmClient, SlurmError
from apps.power.drivers.base import HardwareState, PowerDriverError

IN_TRANSITION = {"POWER_DOWN", "POWER_UP", "POWERING_DOWN", "POWERING_UP"}
NOT_ANSWERING = {"DOWN", "NOT_RESPONDING"}
POWER_SAVING_HINT = (
    "Is power saving configured in slurm.conf (SuspendProgram, ResumeProgram and a SuspendTime "
    "other than INFINITE)?"
)


def hardware_state(slurm_state: str) -> HardwareState:
    """`IDLE+POWERED_DOWN`, `MIXED`, `DOWN+NOT_RESPONDING+POWERING_UP`, ... as on/off/unknown."""
    flags = {flag.strip() for flag in slurm_state.upper().split("+")}
    if flags & IN_TRANSITION:
        return "unknown"
    if "POWERED_DOWN" in flags:
        return "off"
    if flags & NOT_ANSWERING:
        return "unknown"
    return "on"


class SlurmPowerDriver:
    """Power saving through the cluster's Slurm (settings `SLURM_*`, the integration's)."""

    name = "slurm"

    def power_off(self, node) -> None:
        """Ask Slurm to power the node down; a node already off is left alone."""
        if self.read_state(node) != "off":
            self._update(node, "POWER_DOWN", "power it down through Slurm")

    def power_on(self, node) -> None:
        """Ask Slurm to power the node up; a node already on is left alone."""
        if self.read_state(node) != "on":
            self._update(node, "POWER_UP", "power it up through Slurm")

    def read_state(self, node) -> HardwareState:
        """The node's power state as Slurm's controller holds it now."""
        return hardware_state(self.slurm_state(node))

    def slurm_state(self, node) -> str:
        """Slurm's state field for the node, e.g. `IDLE+POWERED_DOWN`."""
        try:
            out = SlurmClient().run("scontrol", "-o", "show", "node", node.hostname)
        except SlurmError as error:
            raise self._refused(node, "read its state from Slurm", error) from error
        for part in out.split():
            if part.startswith("State="):
                return part.removeprefix("State=")
        raise PowerDriverError(
            f"Node {node.hostname}: scontrol show node printed no State ({out.strip()[:200]!r})."
        )

    def _update(self, node, state: str, doing: str) -> None:
        try:
            SlurmClient().run("scontrol", "update", f"NodeName={node.hostname}", f"State={state}")
        except SlurmError as error:
            raise self._refused(node, doing, error) from error

    @staticmethod
    def _refused(node, doing: str, error: SlurmError) -> PowerDriverError:
        reason = error.reason
        words = reason.lower()
        if "invalid node name" in words or f"node {node.hostname.lower()} not found" in words:
            return PowerDriverError(
                f"Node {node.hostname}: Slurm does not know this node ({reason}); the Slurm "
                "node name must be the portal node's hostname."
            )
        hint = f". {POWER_SAVING_HINT}" if "invalid node state" in words else ""
        return PowerDriverError(f"Node {node.hostname}: could not {doing}: {reason}{hint}")
