import json

from django.contrib import admin
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.forms.models import model_to_dict

from apps.audit.models import AuditEvent
from apps.audit.services import audit_record

_SECRET_FIELDS = {"password"}


class _SnapshotEncoder(DjangoJSONEncoder):
    def default(self, o):
        if isinstance(o, models.Model):
            return o.pk
        return super().default(o)


def _snapshot(obj) -> dict:
    """JSON-safe field values of a row, without secrets, for before/after."""
    data = {k: v for k, v in model_to_dict(obj).items() if k not in _SECRET_FIELDS}
    return json.loads(json.dumps(data, cls=_SnapshotEncoder))


class AuditedModelAdmin(admin.ModelAdmin):
    """Django-admin edits leave an AuditEvent like every other administrative change."""

    def save_model(self, request, obj, form, change):
        before = _snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        audit_record(
            actor=request.user,
            action=f"{obj._meta.model_name}.{'change' if change else 'create'}",
            target=obj,
            before=before,
            after=_snapshot(obj),
            reason="Django admin",
        )

    def delete_model(self, request, obj):
        audit_record(
            actor=request.user,
            action=f"{obj._meta.model_name}.delete",
            target=obj,
            before=_snapshot(obj),
            reason="Django admin",
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("created_at", "actor_name", "action", "object_type", "object_repr")
    list_filter = ("action", "object_type")
    search_fields = ("object_repr", "actor_name", "reason")
    date_hierarchy = "created_at"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
