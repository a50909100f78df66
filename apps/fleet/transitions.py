"""Which state changes a node or GPU allows, in one table that the services enforce and the
pages read to decide which buttons to show."""

from datetime import datetime, timedelta

from django.conf import settings

from apps.fleet.choices import GpuStatus, NodeStatus

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
