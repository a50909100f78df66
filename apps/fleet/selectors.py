from datetime import timedelta

from django.db.models import Count, Prefetch, Q, QuerySet
from django.utils import timezone

from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus
from apps.fleet.models import Gpu, GpuModel, MaintenanceWindow, Node
from apps.fleet.transitions import gpu_operations, node_operations
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
        .annotate(
            open_bookings=Count(
                "holdings", filter=Q(holdings__active=True, holdings__end__gt=next_minute)
            )
        )
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
    for node in nodes:
        node.scheduler_note = notes.get(node.hostname, "")
        node.open_bookings = sum(gpu.open_bookings for gpu in node.physical_gpus)
        node.operations = node_operations(node)
        for gpu in node.physical_gpus:
            gpu.operations = gpu_operations(gpu, node)
            # Active itself, but out of service with its node: shown as such.
            gpu.out_with_node = gpu.status == GpuStatus.ACTIVE and node.status != NodeStatus.UP
    return nodes


def fleet_summary() -> dict:
    """Counts for the home page and /metrics."""
    nodes = dict(Node.objects.values_list("status").annotate(n=Count("id")))
    physical = Gpu.objects.filter(mig_parent__isnull=True)
    return {
        "nodes_by_status": {s.value: nodes.get(s.value, 0) for s in NodeStatus},
        "gpus_by_status": {s.value: physical.filter(status=s).count() for s in GpuStatus},
        "gpus_by_health": {h.value: physical.filter(health=h).count() for h in GpuHealth},
        "gpus_schedulable": physical.schedulable().count(),
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
                    ),
                ),
            ).values("name", "total", "schedulable")
        ),
    }
