"""Signing in with the organisation's identity provider, in a real browser, against a real
OpenID Connect provider process (oidc-provider-mock) the test starts."""

import copy
from urllib.parse import urlparse

import pytest
from django.conf import settings as django_settings
from playwright.sync_api import expect

from apps.audit.models import AuditEvent
from apps.sso import discovery
from apps.sso.models import GroupMapping
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, Team, User
from tests.browser.conftest import login
from tests.sso.provider import start_provider, stop_provider


@pytest.fixture(scope="module")
def oidc_provider():
    provider = start_provider("--require-nonce")
    yield provider
    stop_provider(provider)


@pytest.fixture
def sso_page(page, settings, oidc_provider, demo_data):
    settings.OIDC_ISSUER = oidc_provider.url
    settings.SSO_ENABLED = True
    settings.OIDC_RP_CLIENT_ID = "gpu-portal"
    settings.OIDC_RP_CLIENT_SECRET = "portal-secret"
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "apps.sso.backends.PortalOIDCBackend",
    ]
    discovery.clear_cache()
    GroupMapping.objects.create(
        group="gpu-vision", team=Team.objects.get(slug="vision"), role=TeamRole.MEMBER
    )
    GroupMapping.objects.create(
        group="gpu-nlp", team=Team.objects.get(slug="nlp"), role=TeamRole.MEMBER
    )
    # The provider's page styles itself from a CDN this sandbox cannot reach; serve it nothing.
    page.route(
        "https://cdn.jsdelivr.net/**",
        lambda route: route.fulfill(status=200, content_type="text/css", body=""),
    )
    yield page
    discovery.clear_cache()


def sign_in_with_sso(page, sub: str) -> None:
    page.context.clear_cookies()
    page.goto("/login/")
    page.get_by_role("link", name="Sign in with SSO").click()
    # Now at the identity provider's own sign-in page.
    expect(page.get_by_role("heading", name="Authorize Client")).to_be_visible()
    page.fill("input[name=sub]", sub)
    page.get_by_role("button", name="Authorize").click()


def my_teams(page) -> set[str]:
    page.goto("/teams/")
    return {
        text.strip()
        for text in page.locator("main table tbody tr td:first-child").all_inner_texts()
    }


def test_sso_sign_in_lands_as_the_right_user_with_the_right_teams_and_follows_group_changes(
    sso_page, oidc_provider
):
    page = sso_page
    oidc_provider.set_user(
        "sub-zoe",
        {"preferred_username": "zoe", "email": "zoe@example.org", "groups": ["gpu-vision"]},
    )
    sign_in_with_sso(page, "sub-zoe")
    expect(page.locator(".user-menu")).to_contain_text("zoe")
    assert (
        urlparse(page.url).path == "/"
        and urlparse(page.url).port != urlparse(oidc_provider.url).port
    )
    assert "vision" in my_teams(page) and "nlp" not in my_teams(page)

    # Zoe moves from the vision group to the nlp group at the IdP; her next sign-in follows.
    oidc_provider.set_user(
        "sub-zoe",
        {"preferred_username": "zoe", "email": "zoe@example.org", "groups": ["gpu-nlp"]},
    )
    sign_in_with_sso(page, "sub-zoe")
    expect(page.locator(".user-menu")).to_contain_text("zoe")
    teams = my_teams(page)
    assert "nlp" in teams and "vision" not in teams
    zoe = User.objects.get(username="zoe")
    assert set(Membership.objects.filter(user=zoe).values_list("team__slug", flat=True)) == {"nlp"}
    assert AuditEvent.objects.filter(action="membership.remove", object_repr="vision").exists()
    assert AuditEvent.objects.filter(action="membership.add", object_repr="nlp").exists()


def test_sso_user_whose_groups_map_to_nothing_sees_a_clear_page(
    sso_page, oidc_provider, browser_errors
):
    browser_errors.allow(r"status of 403")
    page = sso_page
    oidc_provider.set_user(
        "sub-max", {"preferred_username": "max", "email": "max@example.org", "groups": ["sales"]}
    )
    sign_in_with_sso(page, "sub-max")
    alert = page.get_by_test_id("sso-error").get_by_role("alert")
    expect(alert).to_contain_text("none of your groups")
    expect(page.get_by_role("link", name="log in with a password")).to_be_visible()
    assert not User.objects.filter(username="max").exists()


def test_an_idp_account_named_like_a_local_user_gets_its_own_account_until_the_user_links_it(
    sso_page, oidc_provider, settings, browser_errors
):
    browser_errors.allow(r"status of 403")
    # What production's settings add for the IdP: the link form's answer redirects there.
    policy = copy.deepcopy(settings.CONTENT_SECURITY_POLICY)
    policy["DIRECTIVES"]["form-action"].append(oidc_provider.url)
    settings.CONTENT_SECURITY_POLICY = policy
    page = sso_page
    oidc_provider.set_user(
        "sub-evil-fran",
        {"preferred_username": "fran", "email": "evil@example.org", "groups": ["gpu-vision"]},
    )
    sign_in_with_sso(page, "sub-evil-fran")
    expect(page.locator(".user-menu")).to_contain_text("fran-sso")
    assert page.goto("/billing/").status == 403

    # The real fran, logged in with her password, links her own IdP account.
    oidc_provider.set_user(
        "sub-fran",
        {"preferred_username": "fran", "email": "fran@example.com", "groups": ["gpu-nlp"]},
    )
    page.context.clear_cookies()
    login(page, "fran")
    page.locator(".user-menu").get_by_role("link", name="SSO").click()
    page.fill("#id_password", django_settings.DEMO_PASSWORD)
    page.get_by_role("button", name="Link my SSO account").click()
    expect(page.get_by_role("heading", name="Authorize Client")).to_be_visible()
    page.fill("input[name=sub]", "sub-fran")
    page.get_by_role("button", name="Authorize").click()
    expect(page.get_by_test_id("sso-linked")).to_contain_text("sub-fran")

    sign_in_with_sso(page, "sub-fran")
    expect(page.locator(".user-menu")).to_contain_text("fran")
    expect(page.locator(".user-menu")).not_to_contain_text("fran-sso")
    assert page.goto("/billing/").status == 200
    assert AuditEvent.objects.get(action="sso_identity.link").actor.username == "fran"
