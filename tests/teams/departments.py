"""A small organisation for the unit pages and API tests.

    organisation
    ├── research   (admin ra; H100 6 / 10)   team nlp (H100 2 / 4)
    │   └── lab    (admin la; H100 3 / 6)    team cv (H100 2 / 3; member cv-member)
    └── ops                                  team sre (member sre-member)

(guaranteed / limit)
"""

from apps.teams.models import ROOT_UNIT_SLUG, Membership, OrgUnit, User
from apps.teams.services import (
    quota_set,
    team_create,
    unit_admin_add,
    unit_create,
    unit_quota_set,
)


def build_departments(platform_admin, h100) -> dict:
    root = OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)
    research = unit_create(slug="research", name="Research", parent=root, actor=platform_admin)
    lab = unit_create(slug="lab", name="Lab", parent=research, actor=platform_admin)
    ops = unit_create(slug="ops", name="Ops", parent=root, actor=platform_admin)
    teams = {
        slug: team_create(slug=slug, name=slug.upper(), unit=unit, actor=platform_admin)
        for slug, unit in (("nlp", research), ("cv", lab), ("sre", ops))
    }
    users = {
        name: User.objects.create_user(name) for name in ("ra", "la", "cv-member", "sre-member")
    }
    unit_admin_add(unit=research, user=users["ra"], actor=platform_admin)
    unit_admin_add(unit=lab, user=users["la"], actor=platform_admin)
    Membership.objects.create(team=teams["cv"], user=users["cv-member"])
    Membership.objects.create(team=teams["sre"], user=users["sre-member"])
    unit_quota_set(unit=research, gpu_model=h100, guaranteed=6, limit=10, actor=platform_admin)
    unit_quota_set(unit=lab, gpu_model=h100, guaranteed=3, limit=6, actor=platform_admin)
    quota_set(team=teams["nlp"], gpu_model=h100, guaranteed=2, limit=4, actor=platform_admin)
    quota_set(team=teams["cv"], gpu_model=h100, guaranteed=2, limit=3, actor=platform_admin)
    units = {"root": root, "research": research, "lab": lab, "ops": ops}
    return {"units": units, "teams": teams, "users": {**users, "pa": platform_admin}}
