"""Who may do what. Every later app scopes its querysets and checks writes through here.

Rule of thumb: reads are scoped (objects outside the user's teams do not exist for them: 404);
writes that need a role the user lacks are 403.
"""

from apps.teams.models import Membership, OrgUnit, Team
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
    """Platform admins, the team's admins and the admins of any unit above it."""
    if not user.is_authenticated:
        return False
    if user.is_platform_admin:
        return True
    return Team.objects.managed_by(user).filter(pk=team.pk).exists()


def can_manage_unit(user, unit: OrgUnit | None) -> bool:
    """Whether the user may shape what is below `unit`: add teams and child units there,
    move them, name their admins, and set the quotas of its teams and child units (not the
    unit's own: that is its parent's admins' call)."""
    if unit is None or not user.is_authenticated:
        return False
    return OrgUnit.objects.managed_by(user).filter(pk=unit.pk).exists()


def can_set_team_quota(user, team: Team) -> bool:
    """Platform admins, and the admins of a unit above the team (within its envelope); never
    the team's own admins."""
    return can_manage_unit(user, OrgUnit.objects.get(teams=team))


def can_set_unit_quota(user, unit: OrgUnit) -> bool:
    """Platform admins, and the admins of a unit above it (a unit admin cannot widen their
    own unit's envelope)."""
    if is_platform_admin(user):
        return True
    return unit.parent_id is not None and can_manage_unit(user, unit.parent)
