from dataclasses import dataclass, field

from django.conf import settings

from apps.sso.choices import MappedRole
from apps.sso.models import GroupMapping
from apps.teams.models import OrgUnit

# When several groups grant roles, the stronger one wins.
_TEAM_RANK = {MappedRole.MEMBER: 1, MappedRole.TEAM_ADMIN: 2}
_GLOBAL_RANK = {MappedRole.FINANCE: 1, MappedRole.PLATFORM_ADMIN: 2}


@dataclass
class Grants:
    """What a set of IdP groups grants, and what the IdP manages at all."""

    team_roles: dict[int, str] = field(default_factory=dict)  # team id -> TeamRole value
    team_groups: dict[int, str] = field(default_factory=dict)  # team id -> the granting group
    global_role: str = ""
    global_group: str = ""
    managed_team_ids: set[int] = field(default_factory=set)
    managed_global_roles: set[str] = field(default_factory=set)
    unit_admin_of: dict[int, str] = field(default_factory=dict)  # unit id -> the granting group
    managed_unit_ids: set[int] = field(default_factory=set)

    @property
    def grants_anything(self) -> bool:
        return bool(self.team_roles or self.global_role or self.unit_admin_of)


def grants_for_groups(groups: list[str]) -> Grants:
    grants = Grants()
    wanted = set(groups)
    for mapping in GroupMapping.objects.filter(team__isnull=True).values("group", "role"):
        grants.managed_global_roles.add(mapping["role"])
    grants.managed_team_ids = set(
        GroupMapping.objects.filter(team__isnull=False).values_list("team_id", flat=True)
    )
    for mapping in GroupMapping.objects.filter(group__in=wanted).order_by("group", "role"):
        role = MappedRole(mapping.role)
        if mapping.team_id is not None:
            current = grants.team_roles.get(mapping.team_id)
            if current is None or _TEAM_RANK[role] > _TEAM_RANK[MappedRole(current)]:
                grants.team_roles[mapping.team_id] = role.value
                grants.team_groups[mapping.team_id] = mapping.group
        elif (
            not grants.global_role
            or _GLOBAL_RANK[role] > _GLOBAL_RANK[MappedRole(grants.global_role)]
        ):
            grants.global_role, grants.global_group = role.value, mapping.group
    _unit_admin_grants(grants, wanted)
    return grants


def _unit_admin_grants(grants: Grants, groups: set[str]) -> None:
    """Unit admin roles from SSO_UNIT_ADMIN_GROUPS (group -> unit slug); a slug that names no
    unit grants nothing."""
    mapping = dict(getattr(settings, "SSO_UNIT_ADMIN_GROUPS", {}) or {})
    if not mapping:
        return
    units = dict(OrgUnit.objects.filter(slug__in=mapping.values()).values_list("slug", "pk"))
    grants.managed_unit_ids = set(units.values())
    for group in sorted(groups):
        unit_id = units.get(mapping.get(group, ""))
        if unit_id is not None:
            grants.unit_admin_of.setdefault(unit_id, group)
