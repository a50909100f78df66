from django.conf import settings
from django.db import models
from django.db.models import F, Q

from apps.reservations.choices import OPEN_STATUSES, ReservationStatus
from apps.teams.models import TeamOwnedQuerySet
from portal.formatting import format_span


class Reservation(models.Model):
    """A team's booking of `count` GPUs of one model for [start, end)."""

    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="reservations")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="reservations"
    )
    gpu_model = models.ForeignKey(
        "fleet.GpuModel",
        verbose_name="GPU model",
        on_delete=models.PROTECT,
        related_name="reservations",
    )
    count = models.PositiveIntegerField()
    start = models.DateTimeField(db_index=True)
    end = models.DateTimeField(db_index=True)
    status = models.CharField(
        max_length=16, choices=ReservationStatus.choices, default=ReservationStatus.SCHEDULED
    )
    purpose = models.CharField(max_length=500, blank=True)
    same_node = models.BooleanField(default=False)
    over_quota = models.BooleanField(
        default=False, help_text="Part of it exceeds the team's guarantee: preemptible."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(
        null=True, blank=True, help_text="When it was cancelled or released early."
    )
    end_reason = models.TextField(blank=True)
    released_gpu_hours = models.DecimalField(
        max_digits=12, decimal_places=4, default=0, help_text="Booked GPU-hours given back early."
    )
    reminder_sent_at = models.DateTimeField(null=True, blank=True)

    objects = TeamOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-start", "-id"]
        indexes = [models.Index(fields=["status", "end"], name="reservation_status_end_idx")]
        constraints = [
            models.CheckConstraint(
                condition=Q(end__gt=F("start")),
                name="reservation_end_after_start",
                violation_error_message="The end must be after the start.",
            ),
            models.CheckConstraint(
                condition=Q(count__gt=0),
                name="reservation_count_positive",
                violation_error_message="Book at least one GPU.",
            ),
        ]

    def __str__(self) -> str:
        span = format_span(self.start, self.end)
        return f"#{self.pk} {self.team.slug} {self.count}x{self.gpu_model} {span}"

    @property
    def duration(self):
        return self.end - self.start

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES


class ReservationGpu(models.Model):
    """One GPU held by a reservation over [start, end).

    On PostgreSQL an exclusion constraint (migration 0002) forbids two active holdings of the
    same GPU from overlapping; cancelling a booking deactivates its future holdings.
    """

    reservation = models.ForeignKey(Reservation, on_delete=models.CASCADE, related_name="holdings")
    gpu = models.ForeignKey("fleet.Gpu", on_delete=models.PROTECT, related_name="holdings")
    start = models.DateTimeField()
    end = models.DateTimeField()
    active = models.BooleanField(default=True)
    # What happened to the holding when its GPU left service (drain, retire, maintenance),
    # for the booking's page: moved here from `moved_from`, or left stranded on its GPU.
    moved_from = models.ForeignKey(
        "fleet.Gpu", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    stranded = models.BooleanField(
        default=False, help_text="Its GPU left service and no free GPU could take its place."
    )
    changed_at = models.DateTimeField(null=True, blank=True)
    change_reason = models.CharField(max_length=200, blank=True)
    over_quota = models.BooleanField(
        default=False,
        help_text="This GPU is above the team's guarantee: charged at the over-quota multiplier.",
    )

    class Meta:
        ordering = ["gpu_id", "start"]
        indexes = [
            models.Index(
                fields=["gpu", "end", "start"],
                condition=Q(active=True),
                name="holding_active_gpu_time_idx",
            ),
            # The availability search reads every GPU's holdings over a window, then the next
            # stretch of time (starts in [t, u)): by start, and by end so that past holdings
            # are skipped; covering, so that neither reads the table.
            models.Index(
                fields=["start"],
                condition=Q(active=True),
                include=["gpu", "end"],
                name="holding_active_start_idx",
            ),
            models.Index(
                fields=["end"],
                condition=Q(active=True),
                include=["gpu", "start"],
                name="holding_active_end_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(end__gt=F("start")),
                name="holding_end_after_start",
                violation_error_message="A holding must end after it starts.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_id} {format_span(self.start, self.end)}"
