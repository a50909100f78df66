"""Who may do what. Every later app scopes its querysets and checks writes through here.

Rule of thumb: reads are scoped (objects outside the user's teams do not exist for them: 404);
writes that need a role the user lacks are 403.
"""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from apps.teams.choices import TeamRole
from apps.teams.models import Membership, Team


def team_ids_for(user) -> set[int]:
    """Ids of the teams the user belongs to (not all teams, even for admins)."""
    if not user.is_authenticated:
        return set()
    return set(Membership.objects.filter(user=user).values_list("team_id", flat=True))


def can_view_team(user, team: Team) -> bool:
    return Team.objects.for_user(user).filter(pk=team.pk).exists()


def can_manage_team(user, team: Team) -> bool:
    if not user.is_authenticated:
        return False
    if user.is_platform_admin:
        return True
    return Membership.objects.filter(user=user, team=team, role=TeamRole.TEAM_ADMIN).exists()


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
