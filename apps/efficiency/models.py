from decimal import Decimal

from django.conf import settings
from django.db import models


class DigestSetting(models.Model):
    """A team's choice about the weekly right-sizing digest to its admins. No row: it gets it."""

    team = models.OneToOneField(
        "teams.Team", on_delete=models.CASCADE, related_name="digest_setting"
    )
    weekly_digest = models.BooleanField(default=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.team_id}: weekly digest {'on' if self.weekly_digest else 'off'}"


class DigestSent(models.Model):
    """A team's digest of one week, sent once: a second beat run of the week finds it here."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="+")
    week = models.DateField(help_text="Monday (UTC) of the week the digest covers.")
    items = models.PositiveIntegerField(default=0)
    saving = models.DecimalField(max_digits=14, decimal_places=2, default=Decimal(0))
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-week", "team_id"]
        verbose_name = "digest sent"
        verbose_name_plural = "digests sent"
        constraints = [
            models.UniqueConstraint(fields=["team", "week"], name="digestsent_unique_team_week")
        ]

    def __str__(self) -> str:
        return f"digest of {self.team_id} for the week of {self.week}"


class AllocationKind(models.TextChoices):
    JOB = "job", "Job"
    BOOKING = "booking", "Booking"


class AllocationSummary(models.Model):
    """The efficiency of a job or booking that has ended, summed once from its telemetry (beat's
    `efficiency.summarize`), so that advice over weeks reads one row per allocation instead of
    every rollup of every GPU it held. Allocations still running, or cut by the window asked
    for, are summed live instead."""

    kind = models.CharField(max_length=8, choices=AllocationKind.choices)
    source_id = models.BigIntegerField(help_text="The job's or reservation's id.")
    start = models.DateTimeField(help_text="When its first GPU was taken.")
    end = models.DateTimeField(help_text="When its last GPU was given back.")
    figures = models.JSONField(help_text="The efficiency figures (as the API shows them).")
    computed_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "allocation summaries"
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "source_id"], name="allocationsummary_unique_kind_source"
            ),
            models.CheckConstraint(
                condition=models.Q(end__gte=models.F("start")),
                name="allocationsummary_end_not_before_start",
            ),
        ]
        indexes = [models.Index(fields=["kind", "end", "start"], name="allocsummary_kind_time_idx")]

    def __str__(self) -> str:
        return f"{self.kind} #{self.source_id} efficiency"
