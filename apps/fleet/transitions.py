"""Which state changes a node or GPU allows, in one table that the services enforce and the
pages read to decide which buttons to show."""

from datetime import datetime, timedelta

from django.conf import settings

from apps.fleet.choices import GpuStatus, NodeStatus, PowerState

# operation: (states it may start from, state it leads to)
NODE_TRANSITIONS: dict[str, tuple[set[str], str]] = {
    "drain": ({NodeStatus.UP, NodeStatus.UNREACHABLE}, NodeStatus.DRAINED),
    # Back to the health the node has: UNREACHABLE if its agent is silent (`undrained_status`).
    "undrain": ({NodeStatus.DRAINED}, NodeStatus.UP),
    "retire": ({NodeStatus.UP, NodeStatus.UNREACHABLE, NodeStatus.DRAINED}, NodeStatus.RETIRED),
}
GPU_TRANSITIONS: dict[str, tuple[set[str], str]] = {
    "drain": ({GpuStatus.ACTIVE}, GpuStatus.DRAINED),
    "undrain": ({GpuStatus.DRAINED}, GpuStatus.ACTIVE),
    "retire": ({GpuStatus.ACTIVE, GpuStatus.DRAINED}, GpuStatus.RETIRED),
}
# Power: operation -> (power states it may start from, state it leads to). `power_off` and
# `power_on` are asked for (by the power policy or a platform admin); the others are what the
# node's driver reports back (or its silence past the resume timeout).
POWER_TRANSITIONS: dict[str, tuple[set[str], str]] = {
    "power_off": ({PowerState.ON}, PowerState.SUSPENDING),
    "suspended": ({PowerState.SUSPENDING}, PowerState.OFF),
    # The driver could not power the node off: it stays on.
    "suspend_failed": ({PowerState.SUSPENDING}, PowerState.ON),
    "power_on": ({PowerState.OFF, PowerState.RESUME_FAILED}, PowerState.RESUMING),
    # A node that failed to resume in time but comes back later is on again.
    "resumed": ({PowerState.RESUMING, PowerState.RESUME_FAILED}, PowerState.ON),
    "resume_failed": ({PowerState.RESUMING}, PowerState.RESUME_FAILED),
}
# Asked for by people or the policy; the rest are observed.
POWER_REQUESTS = ("power_off", "power_on")
# The one rule of powered-down capacity: a node in any of these states offers no GPUs now
# (metering counts them powered off; the scheduler does not place work there). Only `on` is
# capacity now; `suspending`, `off` and `resuming` can be ready again after the resume time.
POWERED_DOWN_STATES = frozenset(
    {PowerState.SUSPENDING, PowerState.OFF, PowerState.RESUMING, PowerState.RESUME_FAILED}
)

# A GPU of a node in one of these states follows its node: its own drain/undrain is not offered
# (undraining it would not bring it back while the node is out).
NODE_STATES_GOVERNING_GPUS = {NodeStatus.DRAINED, NodeStatus.RETIRED}


def node_silence() -> timedelta:
    """How long an agent may be silent before its node counts as unreachable."""
    return timedelta(
        seconds=settings.TELEMETRY_POLL_SECONDS * settings.TELEMETRY_MISSED_POLLS_UNREACHABLE
    )


def undrained_status(node, now: datetime) -> str:
    """The state an undrain leads to: the health the node has, not a blanket `up`. A node whose
    agent has been silent longer than `node_silence` (it was unreachable when drained, or went
    silent while drained) is unreachable until it reports; one never heard from is `up`, as
    the health check never judges it either."""
    if node.last_seen is not None and node.last_seen < now - node_silence():
        return NodeStatus.UNREACHABLE
    return NodeStatus.UP


def node_operations(node) -> list[str]:
    """The operations the node's state allows, in the table's order."""
    return [op for op, (allowed, _) in NODE_TRANSITIONS.items() if node.status in allowed]


def gpu_operations(gpu, node) -> list[str]:
    """The operations the GPU's state (and its node's) allows, in the table's order."""
    if node.status in NODE_STATES_GOVERNING_GPUS:
        return []
    return [op for op, (allowed, _) in GPU_TRANSITIONS.items() if gpu.status in allowed]


def node_power_operations(node) -> list[str]:
    """The power requests (`power_off`, `power_on`) the node's power state allows; none for a
    retired node."""
    if node.status == NodeStatus.RETIRED:
        return []
    return [op for op in POWER_REQUESTS if node.power_state in POWER_TRANSITIONS[op][0]]


def resume_seconds(node) -> int:
    """How long the node takes to power on and take work: `labels["power_resume_seconds"]`,
    else `POWER_RESUME_SECONDS`."""
    value = (node.labels or {}).get("power_resume_seconds")
    try:
        return int(value) if value not in (None, "") else settings.POWER_RESUME_SECONDS
    except (TypeError, ValueError):
        return settings.POWER_RESUME_SECONDS


def power_lead(node) -> timedelta:
    """How far ahead of work a powered-down node must be woken: its resume time plus the
    booking margin (`POWER_BOOKING_MARGIN_SECONDS`)."""
    return timedelta(seconds=resume_seconds(node) + settings.POWER_BOOKING_MARGIN_SECONDS)


def power_ready_at(node, now: datetime) -> datetime | None:
    """When the node could take work if woken now: now for a node that is on; the resume time
    plus the margin after now (or after its wake began, while resuming); None for a node that
    did not power on (an admin must look at it)."""
    if node.power_state == PowerState.ON:
        return now
    if node.power_state == PowerState.RESUME_FAILED:
        return None
    if node.power_state == PowerState.RESUMING:
        return max(now, node.power_state_since + power_lead(node))
    return now + power_lead(node)
