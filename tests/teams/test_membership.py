import pytest

from apps.audit.models import AuditEvent
from apps.teams.choices import TeamRole
from apps.teams.models import Membership
from tests.conftest import client_for
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_team_admin_adds_member_and_change_is_audited(team_admin, team):
    newcomer = UserFactory(username="nina")
    response = client_for(team_admin).post(
        "/api/v1/teams/vision/members/", {"username": "nina", "role": "member"}, format="json"
    )
    assert response.status_code == 201
    assert Membership.objects.filter(team=team, user=newcomer, role=TeamRole.MEMBER).exists()
    event = AuditEvent.objects.get(action="membership.add")
    assert event.actor == team_admin
    assert event.after == {"user": "nina", "role": "member"}


def test_plain_member_cannot_add_members(member, team):
    UserFactory(username="nina")
    response = client_for(member).post(
        "/api/v1/teams/vision/members/", {"username": "nina"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["code"] == "not_team_admin"
    assert not Membership.objects.filter(user__username="nina").exists()
    assert not AuditEvent.objects.exists()


def test_adding_existing_member_is_409_and_unknown_user_400(team_admin, member):
    api = client_for(team_admin)
    duplicate = api.post("/api/v1/teams/vision/members/", {"username": "alice"}, format="json")
    assert duplicate.status_code == 409
    unknown = api.post("/api/v1/teams/vision/members/", {"username": "ghost"}, format="json")
    assert unknown.status_code == 400
    assert "username" in unknown.json()["detail"]
    assert Membership.objects.filter(team__slug="vision").count() == 2


def test_last_team_admin_cannot_be_removed(team_admin, member, team):
    response = client_for(team_admin).delete("/api/v1/teams/vision/members/?username=tara")
    assert response.status_code == 409
    assert response.json()["code"] == "last_team_admin"
    assert Membership.objects.filter(team=team, user=team_admin).exists()


def test_team_admin_removes_member(team_admin, member, team):
    response = client_for(team_admin).delete("/api/v1/teams/vision/members/?username=alice")
    assert response.status_code == 204
    assert not Membership.objects.filter(team=team, user=member).exists()
    assert AuditEvent.objects.get(action="membership.remove").before == {
        "user": "alice",
        "role": "member",
    }


def test_team_admin_of_one_team_cannot_manage_another(team_admin, other_team, outsider):
    response = client_for(team_admin).delete("/api/v1/teams/nlp/members/?username=olga")
    assert response.status_code == 404
    assert Membership.objects.filter(team=other_team, user=outsider).exists()


def test_membership_form_shows_inline_error_for_unknown_user(client, team_admin):
    client.force_login(team_admin)
    response = client.post("/teams/vision/", {"username": "ghost", "role": "member"})
    assert response.status_code == 200
    assert "No active user named" in response.content.decode()
