"""Idle and occupancy group by unit as utilization does (`group=unit`): a unit's figures are its
visible teams' summed; a bad grouping is a 400 on the API and a message on the page."""

import pytest

from apps.teams.models import ROOT_UNIT_SLUG, OrgUnit
from apps.teams.services import team_move, unit_create
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def research(platform_admin, team):
    """organisation > research > lab, with vision in lab; nlp stays at the root."""
    root = OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)
    research = unit_create(slug="research", name="Research", parent=root, actor=platform_admin)
    lab = unit_create(slug="lab", name="Lab", parent=research, actor=platform_admin)
    team_move(team=team, unit=lab, actor=platform_admin)
    return research


def _idle(client, query: str) -> dict[str, list]:
    body = client.get(f"/api/v1/dashboards/idle/?range=7d{query}").json()
    return {trace["name"]: trace["y"] for trace in body["figures"]["idle-hours"]["data"]}


def test_idle_hours_sum_per_unit(platform_admin, history, research):
    client = client_for(platform_admin)
    by_team = _idle(client, "")
    by_unit = _idle(client, "&group=unit")
    # nlp (directly in the root unit) holds the only held-idle GPU; the pool stays apart
    assert by_unit["Organisation (held, idle)"] == by_team["nlp (held, idle)"]
    assert by_unit["unallocated"] == by_team["unallocated"]
    assert not any(name.startswith(("nlp", "vision")) for name in by_unit)
    assert sum(map(sum, by_unit.values())) == pytest.approx(sum(map(sum, by_team.values())))


def test_occupancy_colours_bookings_by_unit(platform_admin, history, research):
    client = client_for(platform_admin)
    body = client.get("/api/v1/dashboards/occupancy/?group=unit").json()
    traces = {t["name"]: t for t in body["figures"]["gantt"]["data"]}
    assert set(traces) == {"Research bookings", "Organisation bookings"}
    assert len(traces["Research bookings"]["y"]) == 2  # vision's two GPUs
    inside = client.get("/api/v1/dashboards/occupancy/?unit=research&group=unit").json()
    assert {t["name"] for t in inside["figures"]["gantt"]["data"]} == {"Lab bookings"}


def test_a_member_groups_only_the_teams_they_see(member, history, research):
    # vision's member: nlp (in the root unit) is not theirs, so no Organisation group
    client = client_for(member)
    occupancy = client.get("/api/v1/dashboards/occupancy/?group=unit").json()
    assert {t["name"] for t in occupancy["figures"]["gantt"]["data"]} == {"Research bookings"}
    assert set(_idle(client, "&group=unit")) <= {"Research (held, idle)"}


@pytest.mark.parametrize("endpoint", ["utilization", "idle", "occupancy"])
def test_a_bad_grouping_is_400(platform_admin, history, endpoint):
    response = client_for(platform_admin).get(f"/api/v1/dashboards/{endpoint}/?group=dept")
    assert response.status_code == 400
    assert response.json()["code"] == "bad_filter"
    assert "group must be team or unit" in response.json()["message"]


@pytest.mark.parametrize("page", ["idle", "occupancy"])
def test_the_pages_offer_grouping_and_say_what_was_wrong(client, platform_admin, research, page):
    client.force_login(platform_admin)
    html = client.get(f"/dashboards/{page}/?group=unit").text
    assert '<option value="unit" selected>' in html
    refused = client.get(f"/dashboards/{page}/?group=dept")
    assert refused.status_code == 200
    assert "group must be team or unit." in refused.text
