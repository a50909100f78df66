from django.contrib import admin

from apps.efficiency.models import AllocationSummary, DigestSent, DigestSetting


class ReadOnlyAdmin(admin.ModelAdmin):
    """Changed by the portal only (the digest toggle is audited on /efficiency/)."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(DigestSetting)
class DigestSettingAdmin(ReadOnlyAdmin):
    list_display = ("team", "weekly_digest", "updated_by", "updated_at")
    list_filter = ("weekly_digest",)


@admin.register(DigestSent)
class DigestSentAdmin(ReadOnlyAdmin):
    list_display = ("team", "week", "items", "saving", "sent_at")
    list_filter = ("week",)


@admin.register(AllocationSummary)
class AllocationSummaryAdmin(ReadOnlyAdmin):
    list_display = ("kind", "source_id", "start", "end", "computed_at")
    list_filter = ("kind",)
    search_fields = ("source_id",)
