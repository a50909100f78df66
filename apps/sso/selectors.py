from dataclasses import dataclass, field

from apps.sso.choices import MappedRole
from apps.sso.models import GroupMapping

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

    @property
    def grants_anything(self) -> bool:
        return bool(self.team_roles or self.global_role)


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
    return grants
