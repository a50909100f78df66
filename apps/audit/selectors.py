import json
from dataclasses import dataclass
from typing import Any

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


def _distinct(field: str) -> list[str]:
    # order_by(field) replaces the model's default ordering: otherwise its columns join the
    # SELECT DISTINCT and every event of the same action comes back as its own row.
    return list(AuditEvent.objects.order_by(field).values_list(field, flat=True).distinct())


def audit_filter_choices() -> dict[str, list[str]]:
    """Each action, object type and actor name that occurs in the log, once, sorted."""
    return {
        "actions": _distinct("action"),
        "object_types": _distinct("object_type"),
        "actors": _distinct("actor_name"),
    }


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: str
    after: str


def _shown(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return str(value)


def field_changes(before: dict | None, after: dict | None) -> list[FieldChange]:
    """The fields an event changed, readable: (field, before, after) for every field whose
    value differs, in field order. A creation lists every field with nothing before, a
    deletion every field with nothing after. A value that is not a dict shows as one row."""
    if before is not None and not isinstance(before, dict):
        before = {"value": before}
    if after is not None and not isinstance(after, dict):
        after = {"value": after}
    old, new = before or {}, after or {}
    fields = list(old) + [key for key in new if key not in old]
    changes = []
    for key in fields:
        in_old, in_new = key in old, key in new
        if in_old and in_new and old[key] == new[key]:
            continue
        changes.append(
            FieldChange(
                field=str(key),
                before=_shown(old[key]) if in_old else "—",
                after=_shown(new[key]) if in_new else "—",
            )
        )
    return changes
