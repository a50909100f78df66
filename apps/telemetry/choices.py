from django.db import models


class IdleKind(models.TextChoices):
    HELD_IDLE = "held_idle", "Held but idle"
    UNALLOCATED = "unallocated", "Unallocated"


class ActivitySignal(models.TextChoices):
    """What busy time and idleness are measured with on a GPU."""

    SM_ACTIVE = "sm_active", "SM activity (GPM)"
    UTIL = "util", "Utilization %"
