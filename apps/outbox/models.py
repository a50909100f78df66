from django.db import models
from django.db.models import Q
from django.utils import timezone


class OutboxKind(models.TextChoices):
    TASK = "task", "Celery task"
    EMAIL = "email", "Email"


class OutboxMessage(models.Model):
    """A message the portal must send once its transaction commits (a kill or launch for a node
    agent, a booking notice). Written in the same transaction as the change that needs it, then
    sent by `outbox_flush` until the broker or mail server takes it: an outage delays it, never
    loses it. Sent at least once (a crash between sending and marking may send it twice;
    agents ignore a repeated launch or kill)."""

    kind = models.CharField(max_length=16, choices=OutboxKind.choices)
    name = models.CharField(max_length=200, help_text="Task name, or the email's subject.")
    queue = models.CharField(max_length=255, blank=True)
    payload = models.JSONField(default=dict)
    # Names a message its sender may withdraw while it is unsent (a job's launch, cancelled
    # before it went out).
    key = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(
                fields=["kind", "id"], condition=Q(sent_at__isnull=True), name="outbox_unsent_idx"
            ),
            models.Index(fields=["sent_at"], name="outbox_sent_idx"),
            models.Index(
                fields=["key"],
                condition=Q(sent_at__isnull=True) & ~Q(key=""),
                name="outbox_unsent_key_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} -> {self.queue or '-'}"
