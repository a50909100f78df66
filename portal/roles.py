"""Portal-wide roles of a user (platform admin, finance), for every app.

They are flags of the user account (`teams.User`), so checking them needs no app's models:
fleet and audit, which sit below teams in the app layers, use them from here. Team roles
(member, team admin) need memberships and live in `apps.teams.permissions`.
"""

from rest_framework.permissions import SAFE_METHODS, BasePermission


def is_platform_admin(user) -> bool:
    return bool(user.is_authenticated and user.is_platform_admin)


def is_finance(user) -> bool:
    return bool(user.is_authenticated and user.is_finance)


class IsPlatformAdmin(BasePermission):
    message = "Only platform admins may do this."

    def has_permission(self, request, view) -> bool:
        return is_platform_admin(request.user)


class ReadAnyWritePlatformAdmin(BasePermission):
    """Authenticated users read; only platform admins change."""

    message = "Only platform admins may change this."

    def has_permission(self, request, view) -> bool:
        if not request.user.is_authenticated:
            return False
        return request.method in SAFE_METHODS or is_platform_admin(request.user)
