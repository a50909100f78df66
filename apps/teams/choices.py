from django.db import models


class GlobalRole(models.TextChoices):
    """Roles that span all teams; team roles live on Membership."""

    NONE = "", "None"
    FINANCE = "finance", "Finance"
    PLATFORM_ADMIN = "platform_admin", "Platform admin"


class TeamRole(models.TextChoices):
    MEMBER = "member", "Member"
    TEAM_ADMIN = "team_admin", "Team admin"


class UnitRole(models.TextChoices):
    UNIT_ADMIN = "unit_admin", "Unit admin"


class ApiTokenScope(models.TextChoices):
    READ_ONLY = "read", "Read only"
    READ_WRITE = "write", "Read and write"
