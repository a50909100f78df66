"""The demo's organisation: two departments of two teams each under the root unit, with a
unit admin (rita, of Research) and Research's H100 envelope, so a newcomer sees the tree."""

from apps.teams.models import OrgUnit, Team, UnitMembership, UnitQuota, User, root_unit_pk

# slug, name, cost centre, teams
DEPARTMENTS = [
    ("research", "Research", "CC-2000", ["vision", "nlp"]),
    ("engineering", "Engineering", "CC-3000", ["speech", "robotics"]),
]
# unit, GPU model, guaranteed, limit: Research guarantees what vision (4) and nlp (8) are.
UNIT_QUOTAS = [("research", "H100-SXM-80GB", 12, 16)]
UNIT_ADMINS = [("rita", "research")]


def seed_departments(*, teams: dict[str, Team], models: dict, password: str) -> None:
    """Create or update the departments, put the demo teams in them, and their admins."""
    root = OrgUnit.objects.get(pk=root_unit_pk())
    units = {}
    for slug, name, cost_center, team_slugs in DEPARTMENTS:
        units[slug], _ = OrgUnit.objects.update_or_create(
            slug=slug, defaults={"name": name, "parent": root, "cost_center": cost_center}
        )
        Team.objects.filter(slug__in=team_slugs).update(unit=units[slug])
    for unit_slug, model_name, guaranteed, limit in UNIT_QUOTAS:
        UnitQuota.objects.update_or_create(
            unit=units[unit_slug],
            gpu_model=models[model_name],
            defaults={"guaranteed": guaranteed, "limit": limit},
        )
    for username, unit_slug in UNIT_ADMINS:
        user, _ = User.objects.get_or_create(
            username=username, defaults={"email": f"{username}@example.com"}
        )
        if not user.check_password(password):  # unchanged hash: sessions stay signed in
            user.set_password(password)
            user.save()
        UnitMembership.objects.get_or_create(user=user, unit=units[unit_slug])
