"""Who may do what. Every later app scopes its querysets and checks writes through here.

Rule of thumb: reads are scoped (objects outside the user's teams do not exist for them: 404);
writes that need a role the user lacks are 403.
"""

from apps.teams.choices import TeamRole
from apps.teams.models import Membership, Team
from portal.roles import (  # noqa: F401 - the portal-wide roles, re-exported for team code
    IsPlatformAdmin,
    ReadAnyWritePlatformAdmin,
    is_finance,
    is_platform_admin,
)


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
