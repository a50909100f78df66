"""Unit admins manage what is below their unit and nothing else: the role matrix for every role
at every level of a small tree.

    organisation
    ├── research      (admin: ra)   team nlp
    │   └── lab       (admin: la)   team cv (team admin: cv-admin, member: cv-member)
    └── ops                         team sre (member: sre-member)
"""

import pytest
from django.core.exceptions import ValidationError

from apps.audit.models import AuditEvent
from apps.teams.choices import GlobalRole, TeamRole
from apps.teams.models import ROOT_UNIT_SLUG, Membership, OrgUnit, Quota, Team, UnitQuota, User
from apps.teams.services import (
    membership_add,
    quota_set,
    team_create,
    team_move,
    unit_admin_add,
    unit_admin_remove,
    unit_create,
    unit_quota_set,
)
from portal.exceptions import ConflictError, PolicyRefusal

pytestmark = pytest.mark.django_db

ROLES = ["pa", "fin", "ra", "la", "cv-admin", "cv-member", "sre-member"]


@pytest.fixture
def org(platform_admin):
    root = OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)
    research = unit_create(slug="research", name="Research", parent=root, actor=platform_admin)
    lab = unit_create(slug="lab", name="Lab", parent=research, actor=platform_admin)
    ops = unit_create(slug="ops", name="Ops", parent=root, actor=platform_admin)
    teams = {
        slug: team_create(slug=slug, name=slug.upper(), unit=unit, actor=platform_admin)
        for slug, unit in (("nlp", research), ("cv", lab), ("sre", ops))
    }
    users = {
        "pa": platform_admin,
        "fin": User.objects.create_user("fin", global_role=GlobalRole.FINANCE),
        **{name: User.objects.create_user(name) for name in ROLES[2:]},
    }
    unit_admin_add(unit=research, user=users["ra"], actor=platform_admin)
    unit_admin_add(unit=lab, user=users["la"], actor=platform_admin)
    Membership.objects.create(team=teams["cv"], user=users["cv-admin"], role=TeamRole.TEAM_ADMIN)
    Membership.objects.create(team=teams["cv"], user=users["cv-member"])
    Membership.objects.create(team=teams["sre"], user=users["sre-member"])
    units = {"root": root, "research": research, "lab": lab, "ops": ops}
    return units, teams, users


SEES = {
    "pa": {"nlp", "cv", "sre"},
    "fin": {"nlp", "cv", "sre"},
    "ra": {"nlp", "cv"},
    "la": {"cv"},
    "cv-admin": {"cv"},
    "cv-member": {"cv"},
    "sre-member": {"sre"},
}
MANAGES = {
    "pa": {"nlp", "cv", "sre"},
    "fin": set(),
    "ra": {"nlp", "cv"},
    "la": {"cv"},
    "cv-admin": {"cv"},
    "cv-member": set(),
    "sre-member": set(),
}
# team quotas: platform admins and the admins of a unit above the team, never team admins
SETS_TEAM_QUOTA = {"pa": {"nlp", "cv", "sre"}, "ra": {"nlp", "cv"}, "la": {"cv"}}
# unit quotas: only from above the unit
SETS_UNIT_QUOTA = {"pa": {"root", "research", "lab", "ops"}, "ra": {"lab"}}
# child units and teams: inside one's own subtree
CREATES_IN = {"pa": {"root", "research", "lab", "ops"}, "ra": {"research", "lab"}, "la": {"lab"}}


@pytest.mark.parametrize("role", ROLES)
def test_who_sees_and_manages_which_team(org, role):
    _, _, users = org
    user = users[role]
    assert set(Team.objects.for_user(user).values_list("slug", flat=True)) == SEES[role]
    assert set(Team.objects.managed_by(user).values_list("slug", flat=True)) == MANAGES[role]


@pytest.mark.parametrize("role", ROLES)
def test_who_sets_which_team_quota(org, role, h100):
    _, teams, users = org
    for slug, team in teams.items():
        allowed = slug in SETS_TEAM_QUOTA.get(role, set())
        if allowed:
            quota_set(team=team, gpu_model=h100, guaranteed=1, limit=2, actor=users[role])
        else:
            with pytest.raises(PolicyRefusal):
                quota_set(team=team, gpu_model=h100, guaranteed=1, limit=2, actor=users[role])
        assert Quota.objects.filter(team=team).exists() == allowed
        Quota.objects.filter(team=team).delete()


@pytest.mark.parametrize("role", ROLES)
def test_who_sets_which_unit_quota(org, role, h100):
    units, _, users = org
    for name, unit in units.items():
        allowed = name in SETS_UNIT_QUOTA.get(role, set())
        if allowed:
            unit_quota_set(unit=unit, gpu_model=h100, guaranteed=0, limit=8, actor=users[role])
        else:
            with pytest.raises(PolicyRefusal):
                unit_quota_set(unit=unit, gpu_model=h100, guaranteed=0, limit=8, actor=users[role])
        assert UnitQuota.objects.filter(unit=unit).exists() == allowed
        UnitQuota.objects.filter(unit=unit).delete()


@pytest.mark.parametrize("role", ROLES)
def test_who_adds_units_and_teams_where(org, role):
    units, _, users = org
    for name, unit in units.items():
        allowed = name in CREATES_IN.get(role, set())
        slug = f"{role}-{name}"
        if allowed:
            unit_create(slug=f"u-{slug}", name="New", parent=unit, actor=users[role])
            team_create(slug=f"t-{slug}", name="New", unit=unit, actor=users[role])
        else:
            with pytest.raises(PolicyRefusal):
                unit_create(slug=f"u-{slug}", name="New", parent=unit, actor=users[role])
            with pytest.raises(PolicyRefusal):
                team_create(slug=f"t-{slug}", name="New", unit=unit, actor=users[role])
        assert OrgUnit.objects.filter(slug=f"u-{slug}").exists() == allowed
        assert Team.objects.filter(slug=f"t-{slug}").exists() == allowed


@pytest.mark.parametrize("role", ROLES)
def test_who_adds_members_to_which_team(org, role):
    _, teams, users = org
    for slug, team in teams.items():
        newcomer = User.objects.create_user(f"new-{role}-{slug}")
        if slug in MANAGES[role]:
            membership_add(team=team, user=newcomer, actor=users[role])
        else:
            with pytest.raises(PolicyRefusal):
                membership_add(team=team, user=newcomer, actor=users[role])
        assert Membership.objects.filter(team=team, user=newcomer).exists() == (
            slug in MANAGES[role]
        )


def test_unit_admins_move_teams_only_within_their_subtree_and_name_admins_below(org):
    units, teams, users = org
    team_move(team=teams["nlp"], unit=units["lab"], actor=users["ra"])
    assert Team.objects.get(slug="nlp").unit == units["lab"]
    with pytest.raises(PolicyRefusal):  # ops is outside research
        team_move(team=teams["nlp"], unit=units["ops"], actor=users["ra"])
    with pytest.raises(PolicyRefusal):  # the lab admin cannot take a team out of the lab
        team_move(team=teams["cv"], unit=units["research"], actor=users["la"])
    helper = User.objects.create_user("helper")
    unit_admin_add(unit=units["lab"], user=helper, actor=users["ra"])
    assert set(Team.objects.managed_by(helper).values_list("slug", flat=True)) == {"cv", "nlp"}
    with pytest.raises(ConflictError):
        unit_admin_add(unit=units["lab"], user=helper, actor=users["ra"])
    with pytest.raises(PolicyRefusal):
        unit_admin_add(unit=units["ops"], user=helper, actor=users["la"])
    unit_admin_remove(unit=units["lab"], user=helper, actor=users["la"])
    assert not Team.objects.managed_by(helper).exists()
    with pytest.raises(ValidationError):
        unit_admin_remove(unit=units["lab"], user=helper, actor=users["la"])
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"unit.admin_add", "unit.admin_remove", "team.move"} <= actions


def test_units_a_user_sees(org):
    _, _, users = org
    seen = {
        role: set(OrgUnit.objects.for_user(users[role]).values_list("slug", flat=True))
        for role in ROLES
    }
    assert seen["pa"] == seen["fin"] == {ROOT_UNIT_SLUG, "research", "lab", "ops"}
    assert seen["ra"] == {"research", "lab"}
    assert seen["cv-member"] == {ROOT_UNIT_SLUG, "research", "lab"}
    assert seen["sre-member"] == {ROOT_UNIT_SLUG, "ops"}
