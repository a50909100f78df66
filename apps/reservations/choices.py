from django.db import models


class ReservationStatus(models.TextChoices):
    SCHEDULED = "scheduled", "Scheduled"
    ACTIVE = "active", "Active"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"
    RELEASED = "released", "Released (idle)"


OPEN_STATUSES = (ReservationStatus.SCHEDULED, ReservationStatus.ACTIVE)
