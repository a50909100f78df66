from datetime import datetime, timedelta
from typing import NamedTuple

from django.db.models import Count, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.utils import timezone

from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus, PowerState
from apps.fleet.models import Gpu, GpuModel, MaintenanceWindow, Node, NodePowerEvent
from apps.fleet.transitions import (
    POWERED_DOWN_STATES,
    gpu_operations,
    node_operations,
    node_power_operations,
    power_ready_at,
    resume_seconds,
)
from portal import queries


def node_list() -> QuerySet[Node]:
    return Node.objects.annotate(
        gpu_count=Count("gpus", filter=Q(gpus__mig_parent__isnull=True))
    ).order_by("hostname")


def gpu_list() -> QuerySet[Gpu]:
    return Gpu.objects.select_related("node", "model", "mig_parent")


def fleet_overview() -> list[Node]:
    """Nodes with their physical GPUs (and MIG devices), for the fleet page, in 4 queries
    (plus what subscribers of `fleet.node_notes` read: `scheduler_note` per node).

    Each GPU carries `open_bookings`, the bookings still to run on it, and each node their
    sum, so an admin sees whom a drain affects before confirming it."""
    now = timezone.now()
    # Moving a running booking off a GPU cuts its holding there at the next whole minute (where
    # the replacement starts); such a stub is not an open booking any more.
    next_minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    gpus = (
        Gpu.objects.filter(mig_parent__isnull=True)
        .select_related("model")
        .prefetch_related("mig_devices")
    )
    windows = MaintenanceWindow.objects.filter(end__gt=now).order_by("start")
    nodes = list(
        node_list().prefetch_related(
            Prefetch("gpus", queryset=gpus, to_attr="physical_gpus"),
            Prefetch("maintenance_windows", queryset=windows, to_attr="upcoming_maintenance"),
        )
    )
    # What integrations know of each node (Slurm's state and reason), from their last reading.
    notes: dict[str, str] = {}
    for answer in queries.ask("fleet.node_notes", nodes=nodes):
        notes.update(answer or {})
    booked: dict[int, set[int]] = {}
    gpu_ids = [gpu.pk for node in nodes for gpu in node.physical_gpus]
    for answer in queries.ask("gpus.bookings", start=next_minute, end=None, gpu_ids=gpu_ids):
        for gpu_id, bookings in answer.items():
            booked.setdefault(gpu_id, set()).update(bookings)
    for node in nodes:
        node.scheduler_note = notes.get(node.hostname, "")
        for gpu in node.physical_gpus:
            gpu.open_bookings = len(booked.get(gpu.pk, ()))
        node.open_bookings = sum(gpu.open_bookings for gpu in node.physical_gpus)
        node.operations = node_operations(node)
        node.power_operations = node_power_operations(node)
        for gpu in node.physical_gpus:
            gpu.operations = gpu_operations(gpu, node)
            # Active itself, but out of service with its node: shown as such.
            gpu.out_with_node = gpu.status == GpuStatus.ACTIVE and (
                node.status != NodeStatus.UP or node.power_state != PowerState.ON
            )
    return nodes


def fleet_summary() -> dict:
    """Counts for the home page and /metrics."""
    nodes = dict(Node.objects.values_list("status").annotate(n=Count("id")))
    power = dict(
        Node.objects.exclude(status=NodeStatus.RETIRED)
        .values_list("power_state")
        .annotate(n=Count("id"))
    )
    physical = Gpu.objects.filter(mig_parent__isnull=True)
    return {
        "nodes_by_status": {s.value: nodes.get(s.value, 0) for s in NodeStatus},
        "nodes_by_power_state": {s.value: power.get(s.value, 0) for s in PowerState},
        "gpus_by_status": {s.value: physical.filter(status=s).count() for s in GpuStatus},
        "gpus_by_health": {h.value: physical.filter(health=h).count() for h in GpuHealth},
        "gpus_schedulable": physical.schedulable().count(),
        "gpus_powered_down": physical.in_service()
        .filter(node__power_state__in=POWERED_DOWN_STATES)
        .count(),
        "gpu_models": list(
            GpuModel.objects.annotate(
                total=Count("gpus", filter=Q(gpus__mig_parent__isnull=True)),
                schedulable=Count(
                    "gpus",
                    filter=Q(
                        gpus__mig_parent__isnull=True,
                        gpus__status=GpuStatus.ACTIVE,
                        gpus__health=GpuHealth.HEALTHY,
                        gpus__node__status=NodeStatus.UP,
                        gpus__node__power_state=PowerState.ON,
                    ),
                ),
            ).values("name", "total", "schedulable")
        ),
    }


class PoweredOffInterval(NamedTuple):
    node_id: int
    start: datetime
    end: datetime


def powered_off_intervals(start: datetime, end: datetime) -> list[PoweredOffInterval]:
    """Per node, the intervals within [start, end) when its capacity was powered down (any of
    `POWERED_DOWN_STATES`: suspending, off, resuming, resume_failed), clipped to the window,
    from the power history. Adjacent powered-down states form one interval. Ordered by node,
    then start."""
    last_before = NodePowerEvent.objects.filter(node=OuterRef("pk"), at__lt=start).order_by(
        "-at", "-id"
    )
    before = dict(
        Node.objects.annotate(state=Subquery(last_before.values("to_state")[:1]))
        .exclude(state=None)
        .values_list("pk", "state")
    )
    changes: dict[int, list[NodePowerEvent]] = {}
    for event in NodePowerEvent.objects.filter(at__gte=start, at__lt=end).order_by("at", "id"):
        changes.setdefault(event.node_id, []).append(event)
    intervals = []
    for node_id in sorted(set(before) | set(changes)):
        events = changes.get(node_id, [])
        # The state at `start`: the last change before it, else what the first change left.
        state = before.get(node_id) or (events[0].from_state if events else PowerState.ON)
        off_since = start if state in POWERED_DOWN_STATES else None
        for event in events:
            down = event.to_state in POWERED_DOWN_STATES
            if down and off_since is None:
                off_since = event.at
            elif not down and off_since is not None:
                if event.at > off_since:
                    intervals.append(PoweredOffInterval(node_id, off_since, event.at))
                off_since = None
        if off_since is not None and end > off_since:
            intervals.append(PoweredOffInterval(node_id, off_since, end))
    return intervals


def node_power_ready_times(*, now: datetime | None = None) -> dict[str, datetime]:
    """Host name -> when each powered-down node could take work if woken now (resume time plus
    margin); nodes that failed to power on are left out (they take no work until an admin
    looks)."""
    now = now or timezone.now()
    nodes = Node.objects.filter(power_state__in=POWERED_DOWN_STATES).only(
        "hostname", "labels", "power_state", "power_state_since"
    )
    return {
        node.hostname: ready for node in nodes if (ready := power_ready_at(node, now)) is not None
    }


def resuming_capacity(*, now: datetime | None = None) -> list[tuple[str, str, int, datetime]]:
    """Nodes powering up: (host name, GPU model, in-service whole GPUs of that model, when
    they take work: wake start plus the node's resume time), one row per model of a node."""
    rows = (
        Gpu.objects.in_service()
        .filter(mig_parent__isnull=True, node__power_state=PowerState.RESUMING)
        .values("node_id", "model__name")
        .annotate(n=Count("id"))
        .order_by("node_id", "model__name")
    )
    nodes = {n.pk: n for n in Node.objects.filter(power_state=PowerState.RESUMING)}
    return [
        (
            nodes[row["node_id"]].hostname,
            row["model__name"],
            row["n"],
            nodes[row["node_id"]].power_state_since
            + timedelta(seconds=resume_seconds(nodes[row["node_id"]])),
        )
        for row in rows
        if row["node_id"] in nodes
    ]


def power_history(node: Node, limit: int = 20) -> list[NodePowerEvent]:
    """The node's latest power changes, newest first."""
    return list(node.power_events.order_by("-at", "-id")[:limit])
