from django.contrib import admin

from apps.outbox.models import OutboxMessage


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):
    """What the portal still has to send (and what it sent lately): a message stuck here names
    the outage in `last_error`."""

    list_display = ("id", "kind", "name", "queue", "created_at", "attempts", "sent_at")
    list_filter = ("kind", ("sent_at", admin.EmptyFieldListFilter))
    search_fields = ("name", "queue", "last_error")
    readonly_fields = [f.name for f in OutboxMessage._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
