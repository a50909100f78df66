"""The messages between node agents and the portal, defined once for both sides.

The agent (no Django, no database) and the portal (Django) import this module, so a task name,
a queue or a field of a GPU sample cannot drift between sender and receiver. Plain constants
only: nothing here may import Celery, Django or NVML.
"""

# Tasks the portal runs for agents.
INGEST_TASK = "telemetry.ingest"  # one batch of GPU samples (queue TELEMETRY_QUEUE)
REGISTER_NODE_TASK = "telemetry.register_node"  # the node's inventory, at agent start
JOB_REPORT_TASK = "jobs.report"  # a job attempt started, ended or failed on the node

# Tasks each agent runs, on its node's own queue.
LAUNCH_TASK = "agent.launch"
KILL_TASK = "agent.kill"
PING_TASK = "agent.ping"
POLL_TASK = "agent.poll"

PORTAL_QUEUE = "portal"
DEFAULT_TELEMETRY_QUEUE = "telemetry"  # batches wait there until the portal drains many at once
NODE_QUEUE_PREFIX = "node."


def node_queue(hostname: str) -> str:
    """The queue only that node's agent consumes."""
    return f"{NODE_QUEUE_PREFIX}{hostname}"


def hostname_of_queue(queue: str) -> str:
    return queue.removeprefix(NODE_QUEUE_PREFIX)


# A batch: {"node": hostname, "seq": int, "sent_at": agent clock, "samples": [sample, ...],
# "dropped_batches": int, and every few polls "processes": [...]}.
MAX_HOSTNAME = 253  # a DNS name
MAX_SEQ = 2**63 - 1  # a bigint
MAX_SAMPLES_PER_BATCH = 10_000  # 1,000 GPUs and MIG devices per node is already generous

# Measured fields of a sample: (lowest, highest) accepted. NVML gives None where a device
# cannot report one; the portal refuses a value outside its range.
SAMPLE_RANGES: dict[str, tuple[float, float]] = {
    "util_gpu": (0, 100),
    "util_mem": (0, 100),
    "mem_used_mib": (0, 10_000_000),
    "power_w": (0, 10_000),
    "temp_c": (-40, 200),
    "energy_mj": (0, 2**62),
    # GPM metrics (Hopper and newer), percent of the poll interval; absent on older GPUs.
    "sm_active": (0, 100),
    "sm_occupancy": (0, 100),
    "tensor_active": (0, 100),
    "dram_bw_util": (0, 100),
}
INTEGER_FIELDS = frozenset({"util_gpu", "util_mem", "mem_used_mib", "temp_c", "energy_mj"})
# The GPU's state as the agent sees it.
HEALTH_VALUES = ("healthy", "degraded", "lost")

# Every key of a sample the agent sends (None where NVML cannot tell).
SAMPLE_KEYS = (
    "uuid",
    "parent_uuid",  # a MIG device's GPU
    "ts",
    "util_gpu",
    "util_mem",
    "mem_used_mib",
    "mem_total_mib",
    "power_w",
    "temp_c",
    "energy_mj",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_bw_util",
    "ecc_uncorrected",
    "xid",
    "health",
)

# The simulated fleet's power (the demo and tests): the portal's simulated power driver sets a
# node's switch file; the simulated agent reads it before each poll and writes what it now is to
# the state file. Both sides name the files here.
POWER_ON = "on"
POWER_OFF = "off"


def power_switch_paths(folder, hostname: str) -> tuple:
    """(switch, state) files of a simulated node's power under `folder` (a pathlib.Path)."""
    return folder / f"{hostname}.switch", folder / f"{hostname}.state"
