"""Dashboards filter by organisation unit: `unit=<slug>` keeps the teams anywhere below it (and
leaves the unallocated pool out, as a team filter does); a unit one cannot see is 404."""

import pytest

from apps.teams.models import ROOT_UNIT_SLUG, OrgUnit, UnitMembership
from apps.teams.services import team_move, unit_create
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

ENDPOINTS = ["utilization", "idle", "occupancy"]


@pytest.fixture
def research(platform_admin, team):
    """organisation > research > lab, with vision in lab; nlp stays at the root."""
    root = OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)
    research = unit_create(slug="research", name="Research", parent=root, actor=platform_admin)
    lab = unit_create(slug="lab", name="Lab", parent=research, actor=platform_admin)
    team_move(team=team, unit=lab, actor=platform_admin)
    return research


def _names(body) -> set[str]:
    return {trace["name"] for trace in body["figures"]["allocated-busy"]["data"]}


def test_unit_keeps_the_teams_of_its_whole_subtree(platform_admin, history, research):
    client = client_for(platform_admin)
    body = client.get("/api/v1/dashboards/utilization/?range=7d&unit=research").json()
    assert {name.split()[0] for name in _names(body)} == {"vision"}
    assert body["filters"]["unit"] == "research"
    everything = client.get("/api/v1/dashboards/utilization/?range=7d").json()
    assert {"nlp allocated", "unallocated"} <= _names(everything)
    occupancy = client.get("/api/v1/dashboards/occupancy/?unit=research").json()
    assert {t["name"] for t in occupancy["figures"]["gantt"]["data"]} == {"vision bookings"}
    root = client.get("/api/v1/dashboards/occupancy/?unit=organisation").json()
    assert {t["name"] for t in root["figures"]["gantt"]["data"]} == {
        "vision bookings",
        "nlp bookings",
    }


def test_idle_by_unit_leaves_other_teams_and_the_pool_out(platform_admin, history, research):
    body = client_for(platform_admin).get("/api/v1/dashboards/idle/?unit=research").json()
    names = {trace["name"] for trace in body["figures"]["idle-hours"]["data"]}
    assert not any(name.startswith("nlp") or name == "unallocated" for name in names)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_unit_outside_ones_view_is_404(outsider, history, research, endpoint):
    # olga (nlp, at the root) sees the root unit but not research
    client = client_for(outsider)
    assert client.get(f"/api/v1/dashboards/{endpoint}/?unit=research").status_code == 404
    assert client.get(f"/api/v1/dashboards/{endpoint}/?unit=nowhere").status_code == 404
    assert client.get(f"/api/v1/dashboards/{endpoint}/?unit=organisation").status_code == 200


def test_a_unit_admin_filters_their_unit_on_the_page(client, history, research, member):
    UnitMembership.objects.create(unit=research, user=member)
    client.force_login(member)
    html = client.get("/dashboards/utilization/?range=7d&unit=research").text
    assert '<option value="research" selected>Research</option>' in html
    assert client.get("/dashboards/utilization/?unit=ops").status_code == 404


def test_group_by_unit_sums_the_teams_per_child_unit(platform_admin, history, research):
    client = client_for(platform_admin)
    by_team = client.get("/api/v1/dashboards/utilization/?range=7d").json()
    by_unit = client.get("/api/v1/dashboards/utilization/?range=7d&group=unit").json()
    assert by_unit["filters"]["group"] == "unit"
    # vision sits below research (in lab), nlp directly in the root unit
    assert _names(by_unit) >= {"Research allocated", "Organisation allocated", "unallocated"}
    team_traces = {t["name"]: t["y"] for t in by_team["figures"]["allocated-busy"]["data"]}
    unit_traces = {t["name"]: t["y"] for t in by_unit["figures"]["allocated-busy"]["data"]}
    assert unit_traces["Research allocated"] == team_traces["vision allocated"]
    assert unit_traces["Organisation allocated"] == team_traces["nlp allocated"]
    heat = by_unit["figures"]["util-team-model"]["data"][0]
    assert set(heat["y"]) <= {"Research", "Organisation"}
    inside = client.get("/api/v1/dashboards/utilization/?range=7d&unit=research&group=unit")
    assert {name.split()[0] for name in _names(inside.json())} == {"Lab"}


def test_group_must_be_team_or_unit(platform_admin, history):
    response = client_for(platform_admin).get("/api/v1/dashboards/utilization/?group=dept")
    assert (
        response.status_code == 400 and "group must be team or unit" in response.json()["message"]
    )
