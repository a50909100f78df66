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


class PowerState(models.TextChoices):
    """Whether the node's hardware is powered (owned by fleet, asked for by the power policy or a
    platform admin, observed through the node's power driver)."""

    ON = "on", "On"
    SUSPENDING = "suspending", "Powering off"
    OFF = "off", "Off"
    RESUMING = "resuming", "Powering on"
    RESUME_FAILED = "resume_failed", "Did not power on"
