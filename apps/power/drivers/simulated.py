"""Power for the simulated fleet of `make demo` and the tests: a switch file per node that the
simulated agent reads before each poll (`workers.protocol.power_switch_paths`). Switched off,
the agent sends nothing (no telemetry, no draw) and writes back that it is off; switched on, it
reports again and writes back that it is on. The driver reads that answer, so a node whose
agent is gone never reads `on`, like hardware that does not come back."""

from pathlib import Path

from django.conf import settings

from apps.power.drivers.base import HardwareState, PowerDriverError
from workers.protocol import POWER_OFF, POWER_ON, power_switch_paths


class SimulatedDriver:
    name = "simulated"

    def power_off(self, node) -> None:
        self._switch(node, POWER_OFF)

    def power_on(self, node) -> None:
        self._switch(node, POWER_ON)

    def read_state(self, node) -> HardwareState:
        _, state = power_switch_paths(Path(settings.POWER_SIMULATED_DIR), node.hostname)
        try:
            answer = state.read_text().strip()
        except FileNotFoundError:
            return "unknown"
        return answer if answer in (POWER_ON, POWER_OFF) else "unknown"

    def _switch(self, node, position: str) -> None:
        switch, _ = power_switch_paths(Path(settings.POWER_SIMULATED_DIR), node.hostname)
        try:
            switch.parent.mkdir(parents=True, exist_ok=True)
            partial = switch.with_suffix(".partial")
            partial.write_text(position)
            partial.replace(switch)  # the agent never reads half a word
        except OSError as error:
            raise PowerDriverError(f"Node {node.hostname}: cannot set {switch}: {error}") from None
