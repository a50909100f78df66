"""The one small interface every power driver implements (Redfish BMC, Slurm power saving, a
site's own scripts, the simulated fleet of the demo).

A driver only *asks* the hardware: `power_off` and `power_on` return once the request is
accepted, and the policy polls `read_state` until the node reports the state it asked for (or
its resume timeout passes). Drivers never touch the database; the policy records every change
through `fleet.services`.
"""

from typing import Literal, Protocol

HardwareState = Literal["on", "off", "unknown"]


class PowerDriverError(Exception):
    """The driver could not ask (unreachable BMC, script failed or timed out, Slurm refused).
    The message says what to fix; it is shown to platform admins as is."""


class PowerDriver(Protocol):
    name: str

    def power_off(self, node) -> None:
        """Ask for a graceful power-off of `node` (a `fleet.Node`)."""

    def power_on(self, node) -> None:
        """Ask for `node` to power on."""

    def read_state(self, node) -> HardwareState:
        """What the hardware says now."""
