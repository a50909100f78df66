from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

from apps.audit.admin import AuditedModelAdmin
from apps.teams.models import Membership, Team, User


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    readonly_fields = ("user", "role", "created_at")
    can_delete = False
    verbose_name_plural = "Memberships (change them on the team's page, where changes are audited)"

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(User)
class UserAdmin(AuditedModelAdmin, BaseUserAdmin):
    fieldsets = BaseUserAdmin.fieldsets + (("Portal role", {"fields": ("global_role",)}),)
    list_display = ("username", "email", "global_role", "is_active", "is_superuser")
    list_filter = ("global_role", "is_active", "is_superuser")


@admin.register(Team)
class TeamAdmin(AuditedModelAdmin):
    list_display = ("slug", "name", "unit", "cost_center", "is_active")
    list_filter = ("is_active", "unit")
    search_fields = ("slug", "name", "cost_center")
    # Moving a team between units checks the units' guarantees: teams.services.team_move.
    readonly_fields = ("unit",)
    inlines = [MembershipInline]
