"""What a node agent does, apart from Celery: read NVML, number batches, buffer and send.

Kept free of Celery and Django so it can be tested directly; `workers.agent.app` wires it to
the broker.
"""

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from workers.agent.nvlink import nvlink_domains
from workers.agent.nvml import NvmlReader
from workers.protocol import INGEST_TASK, REGISTER_NODE_TASK

logger = logging.getLogger(__name__)

Send = Callable[[str, dict], None]


class Agent:
    """One node's agent. `send(task_name, payload)` delivers to the portal or raises.

    Batches that cannot be sent wait in a bounded buffer (oldest dropped first, counted) and go
    out, oldest first, with the next batch that can be sent. Sequence numbers start from the
    clock, so a restarted agent never reuses one: the portal skips a (node, seq) it has seen."""

    def __init__(
        self,
        *,
        hostname: str,
        backend: str,
        reader: NvmlReader,
        send: Send,
        buffer_size: int = 240,
        processes_every: int = 4,
        power=None,
    ) -> None:
        self.hostname = hostname
        self.backend = backend
        self.reader = reader
        self.send = send
        self.pending: deque[dict] = deque()
        self.buffer_size = buffer_size
        self.dropped = 0
        self.processes_every = processes_every
        self._seq = time.time_ns() // 1_000_000
        self._polls = 0
        # A simulated node's power switch (`SimulatedPower`); None: the node is always on.
        self.power = power
        self._powered = True

    def inventory(self) -> dict[str, Any]:
        gpus = self.reader.inventory()
        domains = nvlink_domains(gpus)
        return {
            "node": self.hostname,
            "backend": self.backend,
            "gpus": [{**gpu, "nvlink_domain": domains.get(gpu["uuid"], "")} for gpu in gpus],
        }

    def register(self) -> None:
        self.send(REGISTER_NODE_TASK, self.inventory())

    def poll(self) -> dict:
        """Read every GPU once and send the batch (with any buffered ones). A simulated node
        switched off sends nothing (no telemetry, no draw); switched back on it registers
        again, as a booted node's agent does."""
        if self.power is not None:
            powered, was = self.power.is_on(), self._powered
            self._powered = powered
            if not powered:
                return {"powered_off": True}
            if not was:
                self.register()
        self._seq += 1
        self._polls += 1
        batch: dict[str, Any] = {
            "node": self.hostname,
            "seq": self._seq,
            # The agent's clock: node health judges by when it sent, not when the portal
            # stored it (a buffered batch may wait in the queue long after).
            "sent_at": time.time(),
            "samples": self.reader.sample(),
            "dropped_batches": self.dropped,
        }
        if self._polls % self.processes_every == 1:
            batch["processes"] = self.reader.processes()
        self.flush()  # older batches first, and room for this one if the broker is back
        if len(self.pending) >= self.buffer_size:
            self.pending.popleft()
            self.dropped += 1
        self.pending.append(batch)
        self.flush()
        return {"seq": batch["seq"], "buffered": len(self.pending), "dropped": self.dropped}

    def flush(self) -> int:
        """Send buffered batches oldest first; stop at the first failure. Returns how many."""
        sent = 0
        while self.pending:
            try:
                self.send(INGEST_TASK, self.pending[0])
            except Exception as error:  # noqa: BLE001 - broker down: keep the batch for later
                logger.warning(
                    "cannot reach the portal (%s); %d batches buffered, %d dropped",
                    error,
                    len(self.pending),
                    self.dropped,
                )
                return sent
            self.pending.popleft()
            sent += 1
        return sent
