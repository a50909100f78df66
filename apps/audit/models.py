from django.conf import settings
from django.db import models

from portal.formatting import format_when


class AuditEvent(models.Model):
    """One administrative change: who did what to which object, with the state before and after.

    Append-only: nothing in the portal updates or deletes these rows.
    """

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_events",
    )
    actor_name = models.CharField(
        max_length=150, blank=True, help_text="Kept if the user is later deleted."
    )
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64, db_index=True)
    object_id = models.CharField(max_length=64, db_index=True)
    object_repr = models.CharField(max_length=200)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_object_idx")]

    def __str__(self) -> str:
        actor = self.actor_name or "system"
        return f"{format_when(self.created_at)} {actor} {self.action} {self.object_repr}"
