from django.db import models


class NodeStatus(models.TextChoices):
    UP = "up", "Up"
    UNREACHABLE = "unreachable", "Unreachable"
    DRAINED = "drained", "Drained"
    RETIRED = "retired", "Retired"


class GpuStatus(models.TextChoices):
    """Administrative state, set by platform admins."""

    ACTIVE = "active", "Active"
    DRAINED = "drained", "Drained"
    RETIRED = "retired", "Retired"


class GpuHealth(models.TextChoices):
    """Health as reported by the node agent (NVML)."""

    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded (ECC/XID errors)"
    LOST = "lost", "Lost"
