from datetime import datetime

from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus, PowerState
from apps.fleet.transitions import POWERED_DOWN_STATES, power_ready_at
from portal.formatting import format_span


class GpuModel(models.Model):
    name = models.CharField(max_length=64, unique=True, help_text='e.g. "H100-SXM-80GB"')
    vendor = models.CharField(max_length=32, default="NVIDIA")
    memory_mib = models.PositiveIntegerField(help_text="Memory per GPU in MiB.")

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU model"
        verbose_name_plural = "GPU models"

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    hostname = models.CharField(max_length=253, unique=True)
    status = models.CharField(max_length=16, choices=NodeStatus.choices, default=NodeStatus.UP)
    labels = models.JSONField(default=dict, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    power_state = models.CharField(max_length=16, choices=PowerState.choices, default=PowerState.ON)
    power_state_since = models.DateTimeField(
        default=timezone.now, help_text="When the node entered its power state."
    )
    power_state_by = models.CharField(
        max_length=150,
        blank=True,
        help_text='Who or what asked for the power state: a user name, "power policy", ...',
    )

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname


class NodePowerEvent(models.Model):
    """One change of a node's power state: the history metering reads powered-off time from
    (`selectors.powered_off_intervals`)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="power_events")
    from_state = models.CharField(max_length=16, choices=PowerState.choices)
    to_state = models.CharField(max_length=16, choices=PowerState.choices)
    at = models.DateTimeField(default=timezone.now)
    by = models.CharField(max_length=150, blank=True)
    reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["node", "at"], name="node_power_event_idx")]

    def __str__(self) -> str:
        return f"{self.node.hostname}: {self.from_state} -> {self.to_state} at {self.at}"


def nodes_ready_by(at: datetime, *, now: datetime | None = None) -> list[int]:
    """Ids of powered-down nodes that, woken now, would be ready for work starting at `at`."""
    now = now or timezone.now()
    return [
        node.pk
        for node in Node.objects.filter(power_state__in=POWERED_DOWN_STATES).only(
            "pk", "labels", "power_state", "power_state_since"
        )
        if (ready := power_ready_at(node, now)) is not None and ready <= at
    ]


class GpuQuerySet(models.QuerySet):
    def in_service(self) -> "GpuQuerySet":
        """The fleet's capacity: healthy, active GPUs on a node that is up, whether powered on or
        powered down to save energy (it can be woken). Capacity planning counts these."""
        return self.filter(
            status=GpuStatus.ACTIVE, health=GpuHealth.HEALTHY, node__status=NodeStatus.UP
        )

    def schedulable(self, *, at: datetime | None = None) -> "GpuQuerySet":
        """GPUs that may be offered to bookings and jobs: in service and powered on. With `at`
        (when the work would start), also those of a powered-down node that could be woken and
        ready by then (`transitions.power_ready_at`: its resume time plus the booking margin)."""
        powered = Q(node__power_state=PowerState.ON)
        if at is not None:
            powered |= Q(node_id__in=nodes_ready_by(at))
        return self.in_service().filter(powered)


class Gpu(models.Model):
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="gpus")
    index = models.PositiveSmallIntegerField(help_text="NVML device index on the node.")
    uuid = models.CharField("UUID", max_length=96, unique=True)
    model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="gpus")
    nvlink_domain = models.CharField(
        "NVLink domain",
        max_length=64,
        blank=True,
        help_text="GPUs sharing a domain talk over NVLink/NVSwitch.",
    )
    status = models.CharField(max_length=16, choices=GpuStatus.choices, default=GpuStatus.ACTIVE)
    health = models.CharField(max_length=16, choices=GpuHealth.choices, default=GpuHealth.HEALTHY)
    mig_parent = models.ForeignKey(
        "self",
        verbose_name="MIG parent",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="mig_devices",
    )
    mig_profile = models.CharField(
        "MIG profile", max_length=32, blank=True, help_text='e.g. "1g.10gb"'
    )
    # Metering charges a GPU's unallocated capacity only while it is in the fleet.
    in_fleet_since = models.DateTimeField(
        default=timezone.now, help_text="When the GPU joined the fleet (its capacity is billed)."
    )
    retired_at = models.DateTimeField(
        null=True, blank=True, help_text="When the GPU left the fleet; empty: still in it."
    )

    objects = GpuQuerySet.as_manager()

    class Meta:
        ordering = ["node__hostname", "index", "id"]
        verbose_name = "GPU"
        verbose_name_plural = "GPUs"
        constraints = [
            models.UniqueConstraint(
                fields=["node", "index"],
                condition=Q(mig_parent__isnull=True),
                name="gpu_unique_node_index",
                violation_error_message="The node already has a GPU at this index.",
            ),
            models.CheckConstraint(
                condition=Q(retired_at__isnull=True)
                | Q(retired_at__gte=models.F("in_fleet_since")),
                name="gpu_retired_after_joining",
                violation_error_message="A GPU cannot retire before it joined the fleet.",
            ),
            models.CheckConstraint(
                condition=Q(mig_parent__isnull=True) | ~Q(mig_profile=""),
                name="gpu_mig_device_has_profile",
                violation_error_message="A MIG device needs its profile.",
            ),
        ]

    def __str__(self) -> str:
        suffix = f" MIG {self.mig_profile}" if self.mig_parent_id else ""
        return f"{self.node.hostname}/gpu{self.index}{suffix}"


class MaintenanceWindow(models.Model):
    """A planned period when a node takes no work: its GPUs are never offered inside it."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="maintenance_windows")
    start = models.DateTimeField()
    end = models.DateTimeField()
    reason = models.CharField(max_length=500)
    created_by = models.ForeignKey(
        "teams.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["start", "id"]
        indexes = [models.Index(fields=["end", "start"], name="maintenance_time_idx")]
        constraints = [
            models.CheckConstraint(
                condition=Q(end__gt=models.F("start")),
                name="maintenance_end_after_start",
                violation_error_message="A maintenance window must end after it starts.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.node.hostname} maintenance {format_span(self.start, self.end)}"
