from django.db import models


class IdleKind(models.TextChoices):
    HELD_IDLE = "held_idle", "Held but idle"
    UNALLOCATED = "unallocated", "Unallocated"
