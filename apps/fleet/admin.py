from django.contrib import admin, messages

from apps.audit.admin import AuditedModelAdmin
from apps.fleet import services
from apps.fleet.models import Gpu, GpuModel, Node
from portal.exceptions import ApplicationError


@admin.register(GpuModel)
class GpuModelAdmin(AuditedModelAdmin):
    list_display = ("name", "vendor", "memory_mib")


def _bulk(operation: str, change):
    def run(modeladmin, request, queryset):
        for obj in queryset:
            try:
                change(obj, operation, request.user)
            except ApplicationError as error:
                modeladmin.message_user(request, error.message, messages.WARNING)

    run.short_description = f"{operation.capitalize()} selected (audited)"
    run.__name__ = f"{operation}_selected"
    return run


def _node_change(obj, op, actor):
    services.node_change_state(node=obj, operation=op, actor=actor, reason="Django admin")


def _gpu_change(obj, op, actor):
    services.gpu_change_state(gpu=obj, operation=op, actor=actor, reason="Django admin")


@admin.register(Node)
class NodeAdmin(AuditedModelAdmin):
    list_display = ("hostname", "status", "last_seen")
    list_filter = ("status",)
    search_fields = ("hostname",)
    readonly_fields = ("status", "last_seen")
    actions = [_bulk(op, _node_change) for op in ("drain", "undrain", "retire")]


@admin.register(Gpu)
class GpuAdmin(AuditedModelAdmin):
    list_display = ("__str__", "uuid", "model", "nvlink_domain", "status", "health")
    list_filter = ("model", "status", "health", "node")
    search_fields = ("uuid", "node__hostname")
    readonly_fields = ("status",)
    actions = [_bulk(op, _gpu_change) for op in ("drain", "undrain", "retire")]
