from typing import Any

from django.db import models

from apps.audit.models import AuditEvent


def audit_record(
    *,
    actor,
    action: str,
    target: models.Model,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    reason: str = "",
) -> AuditEvent:
    """Record an administrative change. Call it inside the same transaction as the change,
    so the event exists exactly when the change does."""
    is_user = actor is not None and getattr(actor, "is_authenticated", False)
    return AuditEvent.objects.create(
        actor=actor if is_user else None,
        actor_name=actor.get_username() if is_user else "system",
        action=action,
        object_type=target._meta.label_lower,
        object_id=str(target.pk),
        object_repr=str(target)[:200],
        before=before,
        after=after,
        reason=reason,
    )
