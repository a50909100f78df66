from django.db import models

from apps.teams.choices import GlobalRole, TeamRole


class MappedRole(models.TextChoices):
    """What membership of an IdP group grants: a role in one team, or a portal-wide role."""

    MEMBER = TeamRole.MEMBER.value, "Team member"
    TEAM_ADMIN = TeamRole.TEAM_ADMIN.value, "Team admin"
    FINANCE = GlobalRole.FINANCE.value, "Finance (all teams)"
    PLATFORM_ADMIN = GlobalRole.PLATFORM_ADMIN.value, "Platform admin"


TEAM_ROLES = (MappedRole.MEMBER, MappedRole.TEAM_ADMIN)
GLOBAL_ROLES = (MappedRole.FINANCE, MappedRole.PLATFORM_ADMIN)
