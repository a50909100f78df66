"""The organisation units pages: the tree as each role sees it, a unit's page and its actions
(shown only where allowed, refused otherwise, the services' messages on the form), the team
page's unit path, team creation and the quota page for unit admins."""

import re

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.teams.models import OrgUnit, Quota, Team, UnitMembership, UnitQuota, User
from tests.teams.departments import build_departments

pytestmark = pytest.mark.django_db


@pytest.fixture
def org(platform_admin, h100):
    return build_departments(platform_admin, h100)


def _as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _tree(html: str) -> list[tuple[str, str]]:
    return re.findall(r'data-unit="([a-z-]+)" data-depth="(\d+)"', html)


def test_platform_admin_sees_the_whole_tree_with_admins_teams_and_envelopes(org):
    html = _as(org["users"]["pa"]).get("/teams/units/").text
    assert _tree(html) == [
        ("organisation", "0"),
        ("ops", "1"),
        ("research", "1"),
        ("lab", "2"),
    ]
    research = html.split('data-unit="research"')[1].split("</tr>")[0]
    assert "Organisation / Research" in research
    assert ">ra<" in research.replace("<td>ra</td>", ">ra<")
    assert 'href="/teams/nlp/"' in research
    # nlp's 2 and lab's 3 sit directly below research's 6
    assert "H100-SXM-80GB: 6 / 10; below 5 of 6" in research
    assert 'href="/teams/units/"' in _as(org["users"]["pa"]).get("/teams/").text  # its entry


@pytest.mark.parametrize(
    ("who", "seen"),
    [
        ("ra", [("research", "0"), ("lab", "1")]),
        ("la", [("lab", "0")]),
        ("cv-member", [("organisation", "0"), ("research", "1"), ("lab", "2")]),
        ("sre-member", [("organisation", "0"), ("ops", "1")]),
    ],
)
def test_each_role_sees_only_its_subtree_and_the_path_of_its_teams(org, who, seen):
    html = _as(org["users"][who]).get("/teams/units/").text
    assert _tree(html) == seen
    if who == "cv-member":
        assert 'href="/teams/nlp/"' not in html  # a unit on the path shows only one's teams


def test_a_user_in_no_team_sees_the_empty_state(org):
    html = _as(User.objects.create_user("newcomer")).get("/teams/units/").text
    assert 'data-testid="unit-empty"' in html and "Ask a platform admin" in html


def test_unit_pages_outside_ones_subtree_do_not_exist(org):
    assert _as(org["users"]["la"]).get("/teams/units/research/").status_code == 404
    assert _as(org["users"]["sre-member"]).get("/teams/units/lab/").status_code == 404
    response = _as(org["users"]["la"]).post(
        "/teams/units/ops/", {"action": "create_unit", "child-slug": "x", "child-name": "X"}
    )
    assert response.status_code == 404 and not OrgUnit.objects.filter(slug="x").exists()


def test_a_member_sees_the_unit_without_actions_and_is_refused_writes(org):
    client = _as(org["users"]["cv-member"])
    html = client.get("/teams/units/lab/").text
    assert "Organisation / Research / Lab" in html
    assert 'name="action"' not in html
    response = client.post(
        "/teams/units/lab/", {"action": "create_unit", "child-slug": "x", "child-name": "X"}
    )
    assert response.status_code == 403 and not OrgUnit.objects.filter(slug="x").exists()


def test_unit_admin_adds_a_child_unit_and_bad_input_is_explained(org):
    client = _as(org["users"]["ra"])
    html = client.get("/teams/units/research/").text
    assert 'value="create_unit"' in html and 'value="set_quota"' not in html  # own envelope
    bad = client.post(
        "/teams/units/research/",
        {"action": "create_unit", "child-slug": "Bad Slug", "child-name": "Bad"},
    )
    assert bad.status_code == 200 and "Use lowercase letters" in bad.text
    taken = client.post(
        "/teams/units/research/", {"action": "create_unit", "child-slug": "ops", "child-name": "O"}
    )
    assert "A unit with the slug “ops” already exists." in taken.text
    done = client.post(
        "/teams/units/research/",
        {"action": "create_unit", "child-slug": "vision-lab", "child-name": "Vision lab"},
        follow=True,
    )
    assert "Unit Vision lab is created in Research." in done.text
    assert OrgUnit.objects.get(slug="vision-lab").parent == org["units"]["research"]
    assert AuditEvent.objects.filter(action="unit.create", actor=org["users"]["ra"]).exists()


def test_unit_quota_over_the_parents_envelope_is_refused_with_the_numbers(org):
    client = _as(org["users"]["ra"])
    refused = client.post(
        "/teams/units/lab/",
        {
            "action": "set_quota",
            "quota-gpu_model": "H100-SXM-80GB",
            "quota-guaranteed": 5,
            "quota-limit": 8,
        },
    )
    assert "would be guaranteed 7 GPUs of H100-SXM-80GB, more than the 6" in refused.text
    assert UnitQuota.objects.get(unit=org["units"]["lab"]).guaranteed == 3
    limit_low = client.post(
        "/teams/units/lab/",
        {
            "action": "set_quota",
            "quota-gpu_model": "H100-SXM-80GB",
            "quota-guaranteed": 4,
            "quota-limit": 2,
        },
    )
    assert "must be at least guaranteed (4)" in limit_low.text
    client.post(
        "/teams/units/lab/",
        {
            "action": "set_quota",
            "quota-gpu_model": "H100-SXM-80GB",
            "quota-guaranteed": 4,
            "quota-limit": 8,
        },
    )
    assert UnitQuota.objects.get(unit=org["units"]["lab"]).guaranteed == 4
    # never one's own unit's envelope
    own = client.post(
        "/teams/units/research/",
        {"action": "set_quota", "quota-gpu_model": "", "quota-guaranteed": 1, "quota-limit": 1},
    )
    assert own.status_code == 403


def test_moving_a_team_checks_the_target_envelope_and_the_admins_reach(org, h100):
    pa = org["users"]["pa"]
    client = _as(pa)
    refused = client.post(
        "/teams/units/research/", {"action": "move_team", "team-team": "nlp", "team-unit": "lab"}
    )
    assert "would be guaranteed 4 GPUs of H100-SXM-80GB, more than the 3" in refused.text
    assert Team.objects.get(slug="nlp").unit == org["units"]["research"]
    client.post(
        "/teams/units/research/", {"action": "move_team", "team-team": "nlp", "team-unit": "ops"}
    )
    assert Team.objects.get(slug="nlp").unit == org["units"]["ops"]
    # a unit admin cannot move a team out to a unit they do not manage
    html = (
        _as(org["users"]["la"])
        .post("/teams/units/lab/", {"action": "move_team", "team-team": "cv", "team-unit": "ops"})
        .text
    )
    assert "Select a valid choice" in html
    assert Team.objects.get(slug="cv").unit == org["units"]["lab"]


def test_moving_a_unit_below_itself_is_refused(org):
    client = _as(org["users"]["pa"])
    html = client.post("/teams/units/research/", {"action": "move_unit", "move-parent": "lab"}).text
    assert "Research cannot move below itself." in html
    client.post("/teams/units/lab/", {"action": "move_unit", "move-parent": "ops"})
    assert OrgUnit.objects.get(slug="lab").parent.slug == "ops"


def test_unit_admins_are_added_and_removed_with_confirmation(org):
    client = _as(org["users"]["ra"])
    unknown = client.post("/teams/units/lab/", {"action": "add_admin", "admin-username": "nobody"})
    assert "No active user named “nobody”." in unknown.text
    twice = client.post("/teams/units/lab/", {"action": "add_admin", "admin-username": "la"})
    assert "la is already an admin of Lab." in twice.text
    client.post("/teams/units/lab/", {"action": "add_admin", "admin-username": "cv-member"})
    assert UnitMembership.objects.filter(unit__slug="lab", user__username="cv-member").exists()
    html = client.get("/teams/units/lab/").text
    assert 'data-confirm="Remove cv-member as admin of Lab?"' in html
    assert (
        _as(org["users"]["la"]).post("/teams/units/research/admins/ra/remove/").status_code == 404
    )
    client.post("/teams/units/lab/admins/cv-member/remove/")
    assert not UnitMembership.objects.filter(unit__slug="lab", user__username="cv-member").exists()
    assert AuditEvent.objects.filter(action="unit.admin_remove").count() == 1


def test_the_team_page_shows_the_units_path(org):
    html = _as(org["users"]["cv-member"]).get("/teams/cv/").text
    assert re.search(
        r'data-testid="team-unit">Unit: <a href="/teams/units/lab/">'
        r"Organisation / Research / Lab</a>",
        html,
    )


def test_unit_admins_create_teams_in_their_units_only(org):
    client = _as(org["users"]["la"])
    form = client.get("/teams/new/?unit=lab").text
    assert re.findall(r'<option value="([a-z-]+)"', form) == ["lab"]
    outside = client.post("/teams/new/", {"slug": "robots", "name": "Robots", "unit": "ops"})
    assert "Select a valid choice" in outside.text
    root = client.post("/teams/new/", {"slug": "robots", "name": "Robots", "unit": ""})
    assert "Only platform admins and the unit&#x27;s admins may create teams in it." in root.text
    assert not Team.objects.filter(slug="robots").exists()
    created = client.post("/teams/new/", {"slug": "robots", "name": "Robots", "unit": "lab"})
    assert created.status_code == 302
    assert Team.objects.get(slug="robots").unit.slug == "lab"
    assert _as(org["users"]["cv-member"]).get("/teams/new/").status_code == 403


def test_unit_admins_edit_the_quotas_of_teams_below_their_unit(org, h100):
    client = _as(org["users"]["ra"])
    html = client.get("/quotas/").text
    assert 'data-quota="nlp/H100-SXM-80GB"' in html and "sre" not in html
    saved = client.post(
        "/quotas/", {"team": "cv", "gpu_model": "H100-SXM-80GB", "guaranteed": 3, "limit": 4}
    )
    assert saved.status_code == 302
    assert Quota.objects.get(team__slug="cv").guaranteed == 3
    over = client.post(
        "/quotas/", {"team": "cv", "gpu_model": "H100-SXM-80GB", "guaranteed": 4, "limit": 5}
    )
    assert "more than the 3 the unit guarantees" in over.text
    refused = client.post(
        "/quotas/", {"team": "sre", "gpu_model": "H100-SXM-80GB", "guaranteed": 1, "limit": 1}
    )
    assert refused.status_code == 403 and not Quota.objects.filter(team__slug="sre").exists()
    assert _as(org["users"]["cv-member"]).get("/quotas/").status_code == 403
