"""/api/v1/units/ and the teams API's unit: reads show only one's subtree (404 outside it),
writes outside it are 403, bad input is 400 with field errors, and nothing half-written."""

import pytest

from apps.audit.models import AuditEvent
from apps.teams.models import OrgUnit, Team, UnitMembership, UnitQuota
from tests.conftest import client_for
from tests.teams.departments import build_departments

pytestmark = pytest.mark.django_db


@pytest.fixture
def org(platform_admin, h100):
    return build_departments(platform_admin, h100)


def _api(org, who):
    return client_for(org["users"][who])


def test_list_shows_units_in_tree_order_with_path_teams_quotas_and_admins(org):
    units = _api(org, "pa").get("/api/v1/units/").json()
    assert [u["slug"] for u in units] == ["organisation", "ops", "research", "lab"]
    research = units[2]
    assert research == {
        "slug": "research",
        "name": "Research",
        "parent": "organisation",
        "path": "Organisation / Research",
        "cost_center": "",
        "teams": ["nlp"],
        "quotas": [
            {"gpu_model": "H100-SXM-80GB", "guaranteed": 6, "limit": 10, "guaranteed_below": 5}
        ],
        "admins": ["ra"],
    }


@pytest.mark.parametrize(
    ("who", "seen"),
    [("ra", ["research", "lab"]), ("la", ["lab"]), ("sre-member", ["organisation", "ops"])],
)
def test_each_role_lists_only_what_it_may_see(org, who, seen):
    assert [u["slug"] for u in _api(org, who).get("/api/v1/units/").json()] == seen


def test_reads_outside_ones_subtree_are_404(org):
    assert _api(org, "la").get("/api/v1/units/research/").status_code == 404
    assert (
        _api(org, "la").get("/api/v1/units/lab/").json()["path"] == "Organisation / Research / Lab"
    )
    assert _api(org, "sre-member").get("/api/v1/teams/nlp/").status_code == 404


def test_unit_admin_creates_a_child_unit_and_outside_writes_are_403(org):
    ra = _api(org, "ra")
    created = ra.post(
        "/api/v1/units/", {"slug": "nlp-lab", "name": "NLP lab", "parent": "research"}
    )
    assert (
        created.status_code == 201 and created.json()["path"] == "Organisation / Research / NLP lab"
    )
    outside = ra.post("/api/v1/units/", {"slug": "x", "name": "X", "parent": "ops"})
    assert outside.status_code == 403 and outside.json()["code"] == "not_admin"
    member = _api(org, "cv-member").post(
        "/api/v1/units/", {"slug": "y", "name": "Y", "parent": "lab"}
    )
    assert member.status_code == 403
    assert not OrgUnit.objects.filter(slug__in=["x", "y"]).exists()
    assert AuditEvent.objects.filter(action="unit.create", actor=org["users"]["ra"]).count() == 1


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"slug": "Bad Slug", "name": "B", "parent": "research"}, 400, "slug"),
        ({"slug": "z", "name": "Z", "parent": "nowhere"}, 400, "parent"),
        ({"slug": "z", "parent": "research"}, 400, "name"),
        ({"slug": "ops", "name": "Ops again", "parent": "research"}, 409, None),
    ],
)
def test_bad_unit_input_is_refused_with_field_errors(org, body, status, field):
    response = _api(org, "pa").post("/api/v1/units/", body, format="json")
    assert response.status_code == status, response.json()
    if field:
        assert field in response.json()["detail"]
    assert OrgUnit.objects.count() == 4


def test_patch_parent_moves_a_unit_and_refuses_cycles_and_outsiders(org):
    pa = _api(org, "pa")
    cycle = pa.patch("/api/v1/units/research/", {"parent": "lab"}, format="json")
    assert cycle.status_code == 400 and "parent" in cycle.json()["detail"]
    moved = pa.patch("/api/v1/units/lab/", {"parent": "ops"}, format="json")
    assert moved.status_code == 200 and moved.json()["path"] == "Organisation / Ops / Lab"
    # la sees lab but does not manage its parent (ops now): 403, nothing moves
    refused = _api(org, "la").patch("/api/v1/units/lab/", {"parent": "research"}, format="json")
    assert refused.status_code == 403
    assert OrgUnit.objects.get(slug="lab").parent.slug == "ops"
    assert pa.put("/api/v1/units/lab/", {"parent": "ops"}, format="json").status_code == 405


def test_put_quota_follows_the_envelope_rule(org):
    ra = _api(org, "ra")
    body = {"gpu_model": "H100-SXM-80GB", "guaranteed": 5, "limit": 8}
    over = ra.put("/api/v1/units/lab/quotas/", body, format="json")
    assert over.status_code == 400 and "more than the 6" in over.json()["detail"]["guaranteed"][0]
    low = ra.put("/api/v1/units/lab/quotas/", {**body, "guaranteed": 1}, format="json")
    assert low.status_code == 400  # cv is guaranteed 2 inside lab
    bad = ra.put(
        "/api/v1/units/lab/quotas/", {"gpu_model": "B200", "guaranteed": -1}, format="json"
    )
    assert (
        bad.status_code == 400
        and {"gpu_model", "guaranteed", "limit"} <= bad.json()["detail"].keys()
    )
    own = ra.put("/api/v1/units/research/quotas/", {**body, "guaranteed": 1}, format="json")
    assert own.status_code == 403
    ok = ra.put("/api/v1/units/lab/quotas/", {**body, "guaranteed": 4}, format="json")
    assert ok.status_code == 200 and ok.json()["quotas"][0]["guaranteed"] == 4
    assert UnitQuota.objects.get(unit__slug="lab").limit == 8


def test_admins_are_added_and_removed(org):
    ra = _api(org, "ra")
    added = ra.post("/api/v1/units/lab/admins/", {"username": "cv-member"}, format="json")
    assert added.status_code == 201 and added.json()["admins"] == ["cv-member", "la"]
    again = ra.post("/api/v1/units/lab/admins/", {"username": "cv-member"}, format="json")
    assert again.status_code == 409
    unknown = ra.post("/api/v1/units/lab/admins/", {"username": "ghost"}, format="json")
    assert unknown.status_code == 400 and "username" in unknown.json()["detail"]
    assert (
        _api(org, "la")
        .post("/api/v1/units/research/admins/", {"username": "la"}, format="json")
        .status_code
        == 404
    )
    assert ra.delete("/api/v1/units/lab/admins/?username=cv-member").status_code == 204
    assert ra.delete("/api/v1/units/lab/admins/?username=cv-member").status_code == 404
    assert not UnitMembership.objects.filter(user__username="cv-member").exists()


def test_teams_api_shows_the_unit_filters_by_it_and_moves_teams(org):
    pa = _api(org, "pa")
    assert pa.get("/api/v1/teams/cv/").json()["unit"] == "lab"
    listed = pa.get("/api/v1/teams/?unit=research").json()
    assert [team["slug"] for team in listed["results"]] == ["nlp"]
    over = pa.post("/api/v1/teams/nlp/move/", {"unit": "lab"}, format="json")
    assert over.status_code == 400 and "guaranteed" in over.json()["detail"]
    missing = pa.post("/api/v1/teams/nlp/move/", {"unit": "nowhere"}, format="json")
    assert missing.status_code == 400 and "unit" in missing.json()["detail"]
    moved = pa.post("/api/v1/teams/nlp/move/", {"unit": "ops"}, format="json")
    assert moved.status_code == 200 and moved.json()["unit"] == "ops"
    refused = _api(org, "la").post("/api/v1/teams/cv/move/", {"unit": "ops"}, format="json")
    assert refused.status_code == 403 and Team.objects.get(slug="cv").unit.slug == "lab"
