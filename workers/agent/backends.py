"""Pick the NVML backend of the node agent: the real driver, or simulated GPUs."""

from typing import Any

import pynvml

from workers.agent.nvml import NvmlReader
from workers.agent.simulated import SimulatedNvml


def make_reader(backend: str, hostname: str, **simulated_options: Any) -> NvmlReader:
    """ "real": NVML through pynvml (hostname and options unused: the GPUs name themselves).
    "simulated": SimulatedNvml(hostname, **simulated_options); the reader stamps samples with
    the simulator's clock so that a fake clock drives both."""
    if backend == "real":
        return NvmlReader(pynvml)
    if backend == "simulated":
        nvml = SimulatedNvml(hostname, **simulated_options)
        return NvmlReader(nvml, clock=nvml.clock)
    raise ValueError(f"Unknown NVML backend {backend!r}: use 'real' or 'simulated'")
