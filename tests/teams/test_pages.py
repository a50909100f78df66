"""Team pages: role changes by team admins, the API token page, role-aware navigation and home."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.teams.choices import TeamRole
from apps.teams.models import Membership
from tests.conftest import client_for
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def _browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_team_admin_changes_a_members_role_on_the_team_page_and_it_is_audited(
    team_admin, member, team
):
    page = _browser(team_admin)
    assert 'action="/teams/vision/members/alice/role/"' in page.get("/teams/vision/").text
    response = page.post("/teams/vision/members/alice/role/", {"role": "team_admin"}, follow=True)
    assert "alice is now team admin" in response.text
    assert Membership.objects.get(team=team, user=member).role == TeamRole.TEAM_ADMIN
    event = AuditEvent.objects.get(action="membership.change_role")
    assert event.actor == team_admin
    assert event.before == {"user": "alice", "role": "member"}
    assert event.after == {"user": "alice", "role": "team_admin"}


def test_plain_member_and_other_teams_admin_cannot_change_roles(member, team_admin, team):
    outsider_admin = MembershipFactory(
        team=TeamFactory(slug="nlp"), user=UserFactory(username="otto"), role=TeamRole.TEAM_ADMIN
    ).user
    # A plain member sees no role form and is refused.
    assert "/members/tara/role/" not in _browser(member).get("/teams/vision/").text
    _browser(member).post("/teams/vision/members/tara/role/", {"role": "member"})
    # Another team's admin does not even see the team.
    response = _browser(outsider_admin).post(
        "/teams/vision/members/alice/role/", {"role": "team_admin"}
    )
    assert response.status_code == 404
    assert Membership.objects.get(team=team, user=member).role == TeamRole.MEMBER
    assert Membership.objects.get(team=team, user=team_admin).role == TeamRole.TEAM_ADMIN
    assert not AuditEvent.objects.filter(action="membership.change_role").exists()


def test_role_change_api_is_audited_and_keeps_the_last_team_admin(team_admin, member, team):
    api = client_for(team_admin)
    response = api.patch("/api/v1/teams/vision/members/alice/", {"role": "team_admin"}, "json")
    assert response.status_code == 200
    assert response.json()["role"] == "team_admin"
    bad = api.patch("/api/v1/teams/vision/members/alice/", {"role": "owner"}, "json")
    assert bad.status_code == 400
    api.patch("/api/v1/teams/vision/members/alice/", {"role": "member"}, "json")
    last = api.patch("/api/v1/teams/vision/members/tara/", {"role": "member"}, "json")
    assert last.status_code == 409
    assert last.json()["code"] == "last_team_admin"
    assert AuditEvent.objects.filter(action="membership.change_role").count() == 2


def test_role_change_api_refuses_members_of_the_team(member, team_admin):
    response = client_for(member).patch(
        "/api/v1/teams/vision/members/tara/", {"role": "member"}, "json"
    )
    assert response.status_code == 403
    assert response.json()["code"] == "not_team_admin"


def _nav(html: str) -> str:
    return html.split('data-testid="nav"', 1)[1].split("</ul>", 1)[0]


def test_navigation_offers_what_each_role_can_use(member, team_admin, finance_user, platform_admin):
    member_nav = _nav(_browser(member).get("/").text)
    assert "Reserve GPUs" in member_nav and "/billing/budgets/" not in member_nav
    admin_nav = _nav(_browser(team_admin).get("/").text)
    assert "/billing/budgets/" in admin_nav
    finance_nav = _nav(_browser(finance_user).get("/").text)
    assert "Reserve GPUs" not in finance_nav and "/billing/budgets/" in finance_nav
    platform_nav = _nav(_browser(platform_admin).get("/").text)
    assert "/jobs/what-if/" in platform_nav


def _next_steps(html: str) -> str:
    return html.split('data-testid="home-next"', 1)[1].split("</section>", 1)[0]


def test_finance_and_platform_admin_homes_say_what_to_do_not_to_join_a_team(
    finance_user, platform_admin
):
    for user, links in (
        (finance_user, ["/billing/", "/billing/budgets/", "/billing/rate-cards/"]),
        (platform_admin, ["/fleet/", "/quotas/", "/jobs/what-if/", "/audit/"]),
    ):
        html = _browser(user).get("/").text
        assert "not in any team" not in html
        steps = _next_steps(html)
        for link in links:
            assert f'href="{link}"' in steps, (user.username, link)
        assert "/reservations/new/" not in steps


def test_member_and_team_admin_homes_link_their_next_steps(member, team_admin):
    steps = _next_steps(_browser(member).get("/").text)
    assert "Reserve GPUs" in steps and "/jobs/submit/" in steps
    assert "/billing/budgets/" not in steps
    steps = _next_steps(_browser(team_admin).get("/").text)
    assert 'href="/teams/vision/"' in steps and "/billing/budgets/" in steps


def test_user_without_team_or_role_is_told_to_ask_a_team_admin():
    html = _browser(UserFactory(username="newbie")).get("/").text
    assert "You are not in any team yet" in html


def test_finance_is_offered_no_booking_link_anywhere(finance_user, member, team):
    finance = _browser(finance_user)
    for url in ("/", "/teams/vision/", "/reservations/"):
        assert "/reservations/new/" not in finance.get(url).text, url
    # A member's team page offers booking for that team.
    assert 'href="/reservations/new/?team=vision"' in _browser(member).get("/teams/vision/").text
