from django.db.models import QuerySet

from apps.audit.models import AuditEvent


def audit_event_list(
    *, action: str = "", object_type: str = "", actor: str = "", object_id: str = ""
) -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.select_related("actor")
    if action:
        events = events.filter(action=action)
    if object_type:
        events = events.filter(object_type=object_type)
    if object_id:
        events = events.filter(object_id=object_id)
    if actor:
        events = events.filter(actor_name=actor)
    return events


def audit_filter_choices() -> dict[str, list[str]]:
    return {
        "actions": sorted(AuditEvent.objects.values_list("action", flat=True).distinct()),
        "object_types": sorted(AuditEvent.objects.values_list("object_type", flat=True).distinct()),
    }
