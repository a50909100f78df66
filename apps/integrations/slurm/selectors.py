"""Reads of the Slurm integration that other apps ask for through hooks."""

from apps.integrations.slurm.models import SlurmNode


def fleet_node_notes(*, nodes, **_) -> dict[str, str]:
    """Hook `fleet.node_notes`: Slurm's state and reason of each node, from the last reading
    of `slurm.nodes` (the page makes no Slurm call)."""
    readings = SlurmNode.objects.filter(hostname__in=[node.hostname for node in nodes])
    return {
        r.hostname: f"Slurm: {r.state}" + (f" ({r.reason})" if r.reason else "") for r in readings
    }
