from django.contrib import admin

from apps.telemetry.models import TelemetryDeadLetter


@admin.register(TelemetryDeadLetter)
class TelemetryDeadLetterAdmin(admin.ModelAdmin):
    """Telemetry messages that could not be stored, for admins to inspect (read-only: they
    are evidence of what an agent sent; retention removes them with the raw samples)."""

    list_display = ("received_at", "node", "reason")
    list_filter = ("reason",)
    search_fields = ("node", "reason", "error")
    readonly_fields = ("received_at", "node", "reason", "error", "payload")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
