import pytest
from django.contrib.auth.models import AnonymousUser

from apps.teams.models import Team
from apps.teams.permissions import can_manage_team, can_view_team
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def test_member_sees_only_own_teams(member, team, other_team):
    assert list(Team.objects.for_user(member)) == [team]
    assert can_view_team(member, team)
    assert not can_view_team(member, other_team)


def test_finance_and_platform_admin_see_all_teams(finance_user, platform_admin, team, other_team):
    assert set(Team.objects.for_user(finance_user)) == {team, other_team}
    assert set(Team.objects.for_user(platform_admin)) == {team, other_team}


def test_anonymous_and_inactive_users_see_no_team(member, team):
    assert not Team.objects.for_user(AnonymousUser()).exists()
    member.is_active = False
    member.save()
    assert not Team.objects.for_user(member).exists()


def test_only_team_admins_and_platform_admins_manage_a_team(
    member, team_admin, platform_admin, finance_user, team
):
    assert can_manage_team(team_admin, team)
    assert can_manage_team(platform_admin, team)
    assert not can_manage_team(member, team)
    assert not can_manage_team(finance_user, team)


@pytest.mark.parametrize(
    "url",
    ["/api/v1/teams/", "/api/v1/nodes/", "/api/v1/gpus/", "/api/v1/teams/vision/members/"],
)
def test_anonymous_api_requests_get_401_with_error_body(api_client, team, url):
    response = api_client.get(url)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


@pytest.mark.parametrize("url", ["/", "/teams/", "/fleet/", "/audit/", "/teams/token/"])
def test_anonymous_pages_redirect_to_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_member_cannot_see_other_teams_or_their_members(member, other_team, outsider):
    api = client_for(member)
    assert [t["slug"] for t in api.get("/api/v1/teams/").json()["results"]] == ["vision"]
    assert api.get("/api/v1/teams/nlp/").status_code == 404
    response = api.get("/api/v1/teams/nlp/members/")
    assert response.status_code == 404
    assert "olga" not in response.content.decode()


def test_member_reads_own_team_members(member, team_admin):
    members = client_for(member).get("/api/v1/teams/vision/members/").json()
    assert {(m["username"], m["role"]) for m in members} == {
        ("alice", "member"),
        ("tara", "team_admin"),
    }


def test_member_team_page_of_other_team_is_404(client, member, other_team):
    client.force_login(member)
    response = client.get("/teams/nlp/")
    assert response.status_code == 404
    assert b"belongs to a team you are not in" in response.content


def test_member_gets_403_page_on_audit_log(client, member):
    client.force_login(member)
    response = client.get("/audit/")
    assert response.status_code == 403
    assert b"Only platform admins" in response.content


def test_navigation_shows_admin_links_only_to_platform_admins(client, member, platform_admin):
    client.force_login(member)
    page = client.get("/").content.decode()
    assert 'href="/audit/"' not in page and 'href="/admin/"' not in page
    client.force_login(platform_admin)
    page = client.get("/").content.decode()
    assert 'href="/audit/"' in page and 'href="/admin/"' in page
