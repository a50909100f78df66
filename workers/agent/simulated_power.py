"""The simulated node's power switch (see `workers.protocol.power_switch_paths`): the portal's
simulated driver sets it; the agent obeys it before each poll and writes back what it is."""

import os
from pathlib import Path

from workers.protocol import POWER_OFF, POWER_ON, power_switch_paths


class SimulatedPower:
    def __init__(self, folder: Path, hostname: str) -> None:
        self.switch, self.state = power_switch_paths(Path(folder), hostname)
        self._written: str | None = None

    @classmethod
    def from_env(cls, hostname: str) -> "SimulatedPower":
        return cls(Path(os.environ.get("AGENT_POWER_DIR", "var/power")), hostname)

    def is_on(self) -> bool:
        """Follow the switch (no switch: on) and report the state the node is now in."""
        try:
            wanted = self.switch.read_text().strip()
        except FileNotFoundError:
            wanted = POWER_ON
        position = POWER_OFF if wanted == POWER_OFF else POWER_ON
        if position != self._written or not self.state.exists():
            self.state.parent.mkdir(parents=True, exist_ok=True)
            partial = self.state.with_suffix(".partial-state")
            partial.write_text(position)
            partial.replace(self.state)
            self._written = position
        return position == POWER_ON
