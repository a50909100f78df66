"""Node states both ways: portal drains become Slurm drains, and nodes Slurm has taken out of
service are drained in the portal."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from apps.fleet.choices import NodeStatus
from apps.fleet.models import Node
from apps.fleet.services import node_set_scheduler_drained
from apps.integrations.slurm.client import (
    SlurmError,
)
from apps.integrations.slurm.models import SlurmNode
from apps.integrations.slurm.services.common import _refused, client

DRAIN_REASON_PREFIX = "portal:"


def on_node_state_changed(*, node: Node, operation: str, reason: str = "", actor=None, **_):
    """Hook `node.state_changed`: a node drained or retired in the portal is drained in Slurm
    (running jobs finish, no new ones start), undrained is resumed. Nodes Slurm does not know
    are left alone; any other refusal undoes the portal's change."""
    if operation in ("drain", "retire"):
        who = actor.get_username() if actor is not None else "system"
        words = f"{DRAIN_REASON_PREFIX} {operation} by {who}" + (f": {reason}" if reason else "")
        state, why = "DRAIN", words[:200]
    elif operation == "undrain":
        state, why = "RESUME", ""
    else:
        return
    try:
        client().node_update(node.hostname, state=state, reason=why)
    except SlurmError as error:
        if "invalid node name" in error.reason.lower():
            return
        raise _refused(f"to {operation} node {node.hostname}", error) from error


OUT_OF_SERVICE_STATES = {"drained", "draining", "drain", "down", "fail", "failing"}


def out_of_service(state: str) -> bool:
    """Whether Slurm's node state (`sinfo %T`: `drained`, `down*`, `mixed+drain`, ...) keeps
    new work off the node."""
    words = state.lower().rstrip("*~#!%$@^-").split("+")
    return any(word.rstrip("*~#!%$@^-") in OUT_OF_SERVICE_STATES for word in words)


def nodes_out_of_service() -> dict[str, str]:
    """Nodes Slurm has drained or marked down, with Slurm's reason (for slurm_check)."""
    return {
        name: f"{state}" + (f" ({why})" if why else "")
        for name, (state, why) in client().node_states().items()
        if out_of_service(state)
    }


def nodes_sync(*, now: datetime | None = None) -> dict[str, list[str]]:
    """Follow Slurm's node states (one `sinfo` per run): store each node's state and reason
    for the fleet page; a portal node that Slurm drained or marked down (not the portal's own
    drain, whose reason starts with `portal:`) is drained in the portal, audited with Slurm's
    reason; when Slurm puts such a node back, the portal undrains it. A node a portal admin
    drained is never undrained here. Safe to run twice: the second run changes nothing."""
    now = now or timezone.now()
    states = client().node_states()
    report: dict[str, list[str]] = {"drained": [], "undrained": []}
    readings = {r.hostname: r for r in SlurmNode.objects.filter(hostname__in=states)}
    nodes = {n.hostname: n for n in Node.objects.filter(hostname__in=states)}
    for hostname, (state, why) in sorted(states.items()):
        with transaction.atomic():
            reading = readings.get(hostname) or SlurmNode(hostname=hostname)
            reading.state, reading.reason, reading.read_at = state[:64], why[:500], now
            node = nodes.get(hostname)
            ours = why.startswith(DRAIN_REASON_PREFIX)
            if node is not None and out_of_service(state) and not ours:
                words = state + (f" ({why})" if why else "")
                if node_set_scheduler_drained(
                    node=node, drained=True, scheduler="Slurm", reason=words
                ):
                    reading.drained_in_portal = True
                    report["drained"].append(hostname)
            elif node is not None and reading.drained_in_portal and not out_of_service(state):
                if node_set_scheduler_drained(
                    node=node, drained=False, scheduler="Slurm", reason=f"back in service ({state})"
                ):
                    report["undrained"].append(hostname)
                reading.drained_in_portal = False
            if node is not None and reading.drained_in_portal:
                # An admin undrained (or retired) it since: it is no longer Slurm's drain.
                status = Node.objects.filter(pk=node.pk).values_list("status", flat=True).get()
                reading.drained_in_portal = status == NodeStatus.DRAINED
            reading.save()
    # Nodes that left Slurm: no reading to show (a drain they caused stays, for an admin).
    SlurmNode.objects.exclude(hostname__in=states).filter(drained_in_portal=False).delete()
    return report
