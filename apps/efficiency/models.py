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
        constraints = [
            models.UniqueConstraint(fields=["team", "week"], name="digestsent_unique_team_week")
        ]

    def __str__(self) -> str:
        return f"digest of {self.team_id} for the week of {self.week}"
