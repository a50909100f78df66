"""Removal at the identity provider ends access in the portal: at the next sign-in, and by the
periodic check (beat) that asks the IdP about each user with the refresh token it issued at
sign-in. Against the real provider process."""

import time

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from rest_framework.test import APIClient

from apps.audit.models import AuditEvent
from apps.sso import sealing
from apps.sso.models import SsoIdentity
from apps.sso.provider_check import sso_identities_check
from apps.sso.services import sso_identity_link
from apps.teams.choices import ApiTokenScope, GlobalRole, TeamRole
from apps.teams.models import ApiToken, Membership, User
from apps.teams.tokens import api_token_create
from tests.factories import TEST_PASSWORD, MembershipFactory, PlatformAdminFactory, UserFactory
from tests.sso.test_login import claims, memberships, refused, sign_in


def carol_with_access(sso, teams) -> tuple[User, Client, str]:
    """carol: vision member and finance through her groups, scratch member by hand (a team the
    portal manages), with one open browser session and one API token."""
    sso.set_user("sub-carol", claims(groups=["gpu-vision", "gpu-finance"]))
    browser = Client()
    assert sign_in(browser, sso, "sub-carol").status_code == 302
    carol = User.objects.get(username="carol")
    MembershipFactory(user=carol, team=teams["scratch"], role=TeamRole.MEMBER)
    _token, key = api_token_create(
        user=carol, name="script", scope=ApiTokenScope.READ_WRITE, expires_in_days=30
    )
    assert api_get(key).status_code == 200
    return carol, browser, key


def api_get(key: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get("/api/v1/teams/")


def assert_access_ended(carol: User, browser: Client, key: str) -> None:
    carol.refresh_from_db()
    # The team managed in the portal keeps her; the IdP-managed team and role are gone.
    assert memberships("carol") == {"scratch": TeamRole.MEMBER}
    assert carol.global_role == GlobalRole.NONE
    assert not browser.get("/").wsgi_request.user.is_authenticated
    assert api_get(key).status_code == 401
    assert not ApiToken.objects.filter(user=carol, revoked_at__isnull=True).exists()
    revoke = AuditEvent.objects.get(action="api_token.revoke")
    assert revoke.actor_name == "system" and "no group gives access" in revoke.reason
    removed = AuditEvent.objects.get(action="membership.remove")
    assert removed.object_repr == "vision" and removed.before["user"] == "carol"
    event = AuditEvent.objects.get(action="sso_identity.deprovision")
    assert event.before == {"user": "carol", "teams": ["vision"], "global_role": "finance"}
    assert event.after["api_tokens_revoked"] == 1 and event.after["sessions_ended"] == 1


@pytest.mark.django_db
def test_removed_from_every_group_the_next_sign_in_ends_memberships_sessions_and_tokens(sso, teams):
    carol, browser, key = carol_with_access(sso, teams)
    sso.set_user("sub-carol", claims(groups=["marketing"]))
    refused(sign_in(Client(), sso, "sub-carol"), "no_mapped_groups", status=403)
    assert_access_ended(carol, browser, key)
    reason = AuditEvent.objects.get(action="sso_identity.deprovision").reason
    assert reason.startswith("Sign-in through the identity provider") and "marketing" in reason
    # Signing in again changes nothing more.
    refused(sign_in(Client(), sso, "sub-carol"), "no_mapped_groups", status=403)
    assert AuditEvent.objects.filter(action="sso_identity.deprovision").count() == 1


@pytest.mark.django_db
def test_a_linked_local_account_loses_its_password_when_the_idp_removes_every_group(sso, teams):
    fran = UserFactory(username="fran")
    sso_identity_link(
        user=fran, issuer=sso.url, subject="sub-fran", actor=PlatformAdminFactory(username="ada")
    )
    sso.set_user("sub-fran", claims("fran", groups=["sales"]))
    refused(sign_in(Client(), sso, "sub-fran"), "no_mapped_groups", status=403)
    fran.refresh_from_db()
    assert not fran.has_usable_password()
    client = Client()
    client.post("/login/", {"username": "fran", "password": TEST_PASSWORD})
    assert not client.get("/").wsgi_request.user.is_authenticated
    assert AuditEvent.objects.get(action="sso_identity.deprovision").after["password_disabled"]


@pytest.mark.django_db
def test_the_refresh_token_is_kept_sealed(sso, teams):
    sso.set_user("sub-carol", claims())
    sign_in(Client(), sso, "sub-carol")
    stored = SsoIdentity.objects.get(subject="sub-carol").refresh_token
    token = sealing.unseal(stored)
    assert token and token not in stored


@pytest.mark.django_db
def test_the_periodic_check_follows_a_partial_group_removal(sso, teams):
    carol, browser, key = carol_with_access(sso, teams)
    sso.set_user("sub-carol", claims(groups=["gpu-finance", "gpu-nlp"]))
    assert sso_identities_check() == {"synced": 1}
    assert memberships("carol") == {"nlp": TeamRole.MEMBER, "scratch": TeamRole.MEMBER}
    removed = AuditEvent.objects.get(action="membership.remove")
    assert removed.object_repr == "vision" and "Periodic check" in removed.reason
    # Still in some groups: her session and token go on.
    assert browser.get("/").wsgi_request.user == carol
    assert api_get(key).status_code == 200
    assert SsoIdentity.objects.get(user=carol).last_checked_at is not None


@pytest.mark.django_db
def test_the_periodic_check_leaves_users_alone_when_the_idp_sends_no_groups_claim(sso, teams):
    carol, browser, key = carol_with_access(sso, teams)
    sso.set_user("sub-carol", {"preferred_username": "carol", "email": "carol@example.org"})
    assert sso_identities_check() == {"no_groups_claim": 1}
    assert memberships("carol") == {"vision": TeamRole.MEMBER, "scratch": TeamRole.MEMBER}
    assert api_get(key).status_code == 200


@pytest.mark.django_db
def test_a_refresh_token_the_idp_revoked_signs_the_user_out_and_stops_the_checks(sso, teams):
    import requests

    carol, browser, key = carol_with_access(sso, teams)
    assert requests.post(f"{sso.url}/users/sub-carol/revoke-tokens", timeout=10).status_code == 204
    assert sso_identities_check() == {"grant_lost": 1}
    assert not browser.get("/").wsgi_request.user.is_authenticated
    assert SsoIdentity.objects.get(user=carol).refresh_token == ""
    assert AuditEvent.objects.get(action="sso_identity.grant_lost").after["sessions_ended"] == 1
    # The IdP did not say she lost her groups: her teams wait for her next sign-in.
    assert memberships("carol") == {"vision": TeamRole.MEMBER, "scratch": TeamRole.MEMBER}
    assert sso_identities_check() == {}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_beat_check_on_a_real_worker_ends_the_access_of_a_user_removed_at_the_idp(sso, teams):
    from celery.contrib.testing.worker import start_worker

    from apps.sso.tasks import check_identities
    from portal.celery import app

    carol, browser, key = carol_with_access(sso, teams)
    sso.set_user("sub-carol", claims(groups=[]))
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
        check_identities.delay()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if AuditEvent.objects.filter(action="sso_identity.deprovision").exists():
                break
            time.sleep(0.2)
    assert_access_ended(carol, browser, key)
    assert not Session.objects.exists()
    assert "Periodic check" in AuditEvent.objects.get(action="sso_identity.deprovision").reason


@pytest.mark.django_db
def test_an_unreachable_idp_changes_nobody_and_the_check_gives_up_early(sso, teams, settings):
    from apps.sso import discovery
    from tests.sso.provider import free_port

    users = []
    for n in range(5):
        sso.set_user(f"sub-{n}", claims(f"user{n}", groups=["gpu-vision"]))
        browser = Client()
        sign_in(browser, sso, f"sub-{n}")
        users.append(browser)
    settings.OIDC_ISSUER = f"http://127.0.0.1:{free_port()}"
    SsoIdentity.objects.update(issuer=settings.OIDC_ISSUER)
    discovery.clear_cache()
    assert sso_identities_check() == {"unreachable": 3}
    assert all(browser.get("/").wsgi_request.user.is_authenticated for browser in users)
    assert Membership.objects.filter(team=teams["vision"]).count() == 5
    assert not SsoIdentity.objects.filter(refresh_token="").exists()
    assert not AuditEvent.objects.exclude(action__in=["user.create", "membership.add"]).exists()
