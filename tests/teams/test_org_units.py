"""The organisation tree above teams: existing teams migrate into one root unit, the tree is
walked as plain data, and units nest their guarantees (what sits below a unit may not be
guaranteed more than the unit guarantees)."""

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.audit.models import AuditEvent
from apps.teams.models import ROOT_UNIT_SLUG, OrgUnit, Quota, Team, UnitQuota
from apps.teams.org_tree import OrgTree
from apps.teams.selectors import org_tree, unit_path_label
from apps.teams.services import (
    quota_set,
    team_create,
    team_move,
    unit_create,
    unit_move,
    unit_quota_set,
)
from portal.exceptions import ConflictError, PolicyRefusal

PREVIOUS = ("teams", "0007_user_time_zone")
UNITS = ("teams", "0008_org_units")


@pytest.mark.django_db(transaction=True)
def test_existing_teams_move_into_one_root_unit_and_back():
    # Only teams' own migrations as targets: apps that build on the units (billing's unit
    # budgets) are unapplied with them and come back at the end.
    executor = MigrationExecutor(connection)
    executor.migrate([PREVIOUS])
    try:
        old = executor.loader.project_state([PREVIOUS]).apps
        for slug in ("vision", "nlp"):
            old.get_model("teams", "Team").objects.create(slug=slug, name=slug.title())
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate([UNITS])
        new = executor.loader.project_state([UNITS]).apps
        units = new.get_model("teams", "OrgUnit").objects.all()
        assert [(u.slug, u.parent_id) for u in units] == [(ROOT_UNIT_SLUG, None)]
        teams = new.get_model("teams", "Team").objects.order_by("slug")
        root = units[0].pk
        assert [(t.slug, t.unit_id) for t in teams] == [("nlp", root), ("vision", root)]
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate([PREVIOUS])
        back = executor.loader.project_state([PREVIOUS]).apps
        assert back.get_model("teams", "Team").objects.count() == 2
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_tree_as_plain_data():
    tree = OrgTree(
        {"org": None, "research": "org", "vision-lab": "research", "ops": "org"},
        {"cv": "vision-lab", "nlp": "research", "sre": "ops"},
    )
    assert tree.path("vision-lab") == ["org", "research", "vision-lab"]
    assert tree.ancestors("vision-lab") == ["vision-lab", "research", "org"]
    assert tree.team_path("cv") == ["org", "research", "vision-lab"]
    assert tree.team_path("unknown") == []
    assert tree.subtree("research") == {"research", "vision-lab"}
    assert tree.teams_under("research") == {"cv", "nlp"}
    assert tree.teams_directly_in("research") == {"nlp"}
    assert tree.teams_under("org") == {"cv", "nlp", "sre"}
    assert tree.would_cycle("research", "vision-lab")
    assert tree.would_cycle("research", "research")
    assert not tree.would_cycle("vision-lab", "ops")


@pytest.fixture
def root(db):
    return OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)


@pytest.fixture
def research(root, platform_admin):
    return unit_create(slug="research", name="Research", parent=root, actor=platform_admin)


@pytest.mark.django_db
def test_a_new_team_joins_the_root_and_pages_name_units_by_their_path(
    root, research, platform_admin
):
    assert Team.objects.create(slug="plain", name="Plain").unit == root
    team = team_create(slug="cv", name="CV", unit=research, actor=platform_admin)
    assert team.unit == research
    assert unit_path_label(research) == "Organisation / Research"
    assert org_tree().teams_under(root.pk) >= {team.pk}
    assert AuditEvent.objects.filter(action="unit.create").count() == 1


@pytest.mark.django_db
def test_only_platform_admins_shape_the_tree_and_slugs_are_unique(
    root, research, platform_admin, team_admin
):
    with pytest.raises(PolicyRefusal):
        unit_create(slug="ops", name="Ops", parent=root, actor=team_admin)
    with pytest.raises(ConflictError):
        unit_create(slug="research", name="Again", parent=root, actor=platform_admin)
    with pytest.raises(ValidationError):
        unit_create(slug="Bad Slug", name="Bad", parent=root, actor=platform_admin)
    with pytest.raises(ValidationError):
        unit_create(slug="second-root", name="Second root", parent=None, actor=platform_admin)
    assert OrgUnit.objects.count() == 2


@pytest.mark.django_db
def test_a_unit_cannot_move_below_itself_nor_the_root_move(root, research, platform_admin):
    lab = unit_create(slug="lab", name="Lab", parent=research, actor=platform_admin)
    with pytest.raises(ValidationError, match="below itself"):
        unit_move(unit=research, parent=lab, actor=platform_admin)
    with pytest.raises(ValidationError, match="root"):
        unit_move(unit=root, parent=research, actor=platform_admin)
    ops = unit_create(slug="ops", name="Ops", parent=root, actor=platform_admin)
    unit_move(unit=lab, parent=ops, actor=platform_admin)
    assert org_tree().path(lab.pk) == [root.pk, ops.pk, lab.pk]
    assert AuditEvent.objects.filter(action="unit.move").count() == 1


@pytest.mark.django_db
def test_guarantees_below_a_unit_stay_within_its_envelope(
    research, team, other_team, h100, platform_admin
):
    team_move(team=team, unit=research, actor=platform_admin)
    team_move(team=other_team, unit=research, actor=platform_admin)
    unit_quota_set(unit=research, gpu_model=h100, guaranteed=10, limit=16, actor=platform_admin)
    quota_set(team=team, gpu_model=h100, guaranteed=4, limit=12, actor=platform_admin)
    quota_set(team=other_team, gpu_model=h100, guaranteed=6, limit=12, actor=platform_admin)
    with pytest.raises(ValidationError, match="11 GPUs of H100-SXM-80GB, more than the 10"):
        quota_set(team=other_team, gpu_model=h100, guaranteed=7, limit=12, actor=platform_admin)
    assert Quota.objects.get(team=other_team).guaranteed == 6  # nothing half-written
    with pytest.raises(ValidationError, match="more than the 9"):
        unit_quota_set(unit=research, gpu_model=h100, guaranteed=9, limit=16, actor=platform_admin)
    assert UnitQuota.objects.get(unit=research).guaranteed == 10
    # the any-model scope has no envelope in this unit: a team's any-model row is free
    quota_set(team=team, gpu_model=None, guaranteed=20, limit=30, actor=platform_admin)


@pytest.mark.django_db
def test_a_unit_fits_its_parents_envelope_and_moves_carry_their_guarantees(
    root, research, team, h100, platform_admin
):
    unit_quota_set(unit=root, gpu_model=h100, guaranteed=16, limit=16, actor=platform_admin)
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=8, limit=8)  # in the root
    with pytest.raises(ValidationError, match="more than the 16"):
        unit_quota_set(unit=research, gpu_model=h100, guaranteed=9, limit=9, actor=platform_admin)
    unit_quota_set(unit=research, gpu_model=h100, guaranteed=8, limit=8, actor=platform_admin)
    lab = unit_create(slug="lab", name="Lab", parent=root, actor=platform_admin)
    unit_quota_set(unit=lab, gpu_model=h100, guaranteed=0, limit=4, actor=platform_admin)
    # the team's 8 guaranteed GPUs do not fit in the lab's 0
    with pytest.raises(ValidationError):
        team_move(team=team, unit=lab, actor=platform_admin)
    # research (8) moving under the lab (0) does not fit either
    with pytest.raises(ValidationError):
        unit_move(unit=research, parent=lab, actor=platform_admin)
    assert Team.objects.get(pk=team.pk).unit.slug == ROOT_UNIT_SLUG
    assert AuditEvent.objects.filter(action="unit_quota.create").count() == 3
