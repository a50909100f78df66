"""`unit_scope`: the teams a unit filter leaves in view and the unit each is grouped under,
never beyond what the user may see."""

import pytest

from apps.teams.selectors import BadGrouping, TeamNotVisible, unit_scope
from tests.teams.departments import build_departments

pytestmark = pytest.mark.django_db


@pytest.fixture
def org(platform_admin, h100):
    return build_departments(platform_admin, h100)


def _groups(scope) -> dict[str, str]:
    return {slug: unit.slug for slug, unit in scope.group_units.items()}


def test_groups_are_the_child_units_of_the_chosen_one(org):
    pa = org["users"]["pa"]
    everything = unit_scope(user=pa, group="unit")
    assert [t.slug for t in everything.teams] == ["cv", "nlp", "sre"]
    assert _groups(everything) == {"cv": "research", "nlp": "research", "sre": "ops"}
    assert everything.group_of == {"cv": "Research", "nlp": "Research", "sre": "Ops"}
    research = unit_scope(user=pa, unit_slug="research", group="unit")
    # nlp sits directly in research: it is grouped under research itself
    assert _groups(research) == {"cv": "lab", "nlp": "research"}
    assert unit_scope(user=pa, unit_slug="research").group_units is None
    assert [t.slug for t in unit_scope(user=pa, unit_slug="lab", team_slug="cv").teams] == ["cv"]


def test_a_unit_admin_sees_only_the_teams_below_their_units(org):
    la = org["users"]["la"]  # admin of lab, below research
    scope = unit_scope(user=la, group="unit")
    assert [t.slug for t in scope.teams] == ["cv"]
    assert _groups(scope) == {"cv": "research"}
    with pytest.raises(TeamNotVisible):
        unit_scope(user=la, unit_slug="research")
    with pytest.raises(TeamNotVisible):
        unit_scope(user=la, unit_slug="lab", team_slug="nlp")
    member = org["users"]["sre-member"]
    assert [t.slug for t in unit_scope(user=member, unit_slug="organisation").teams] == ["sre"]


def test_unknown_unit_and_bad_grouping_are_refused(org):
    pa = org["users"]["pa"]
    with pytest.raises(TeamNotVisible):
        unit_scope(user=pa, unit_slug="nowhere")
    with pytest.raises(BadGrouping, match="group must be team or unit"):
        unit_scope(user=pa, group="dept")
