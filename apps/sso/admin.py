from django.contrib import admin

from apps.audit.admin import AuditedModelAdmin
from apps.sso.models import GroupMapping, SsoIdentity


@admin.register(GroupMapping)
class GroupMappingAdmin(AuditedModelAdmin):
    list_display = ("group", "role", "team", "created_at")
    list_filter = ("role", "team")
    search_fields = ("group", "team__slug")
    autocomplete_fields = ("team",)


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin):
    list_display = ("user", "subject", "issuer", "last_login_at")
    search_fields = ("user__username", "subject")
    readonly_fields = (
        "user",
        "issuer",
        "subject",
        "created_at",
        "last_login_at",
        "last_checked_at",
        "last_groups",
    )
    # Sealed, but still a credential: never shown. Linking is at /sso/identities/link/.
    exclude = ("refresh_token",)

    def has_add_permission(self, request) -> bool:
        return False
