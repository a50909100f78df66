"""What the login page offers with and without an identity provider, and PASSWORD_LOGIN=0."""

import pytest
from django.db import IntegrityError, transaction
from django.test import Client

from apps.sso.models import GroupMapping
from apps.teams.choices import TeamRole
from tests.factories import PlatformAdminFactory, TeamFactory, UserFactory
from tests.sso.conftest import enable_sso

pytestmark = pytest.mark.django_db


def test_without_an_issuer_the_login_page_has_no_sso_button():
    html = Client().get("/login/").content.decode()
    assert "Sign in with SSO" not in html and 'id="id_password"' in html


@pytest.mark.parametrize(
    "path",
    [
        "/sso/",
        "/sso/login/",
        "/sso/callback/?code=a&state=b",
        "/sso/link/",
        "/sso/identities/link/",
    ],
)
def test_without_an_issuer_every_sso_address_is_a_plain_page_saying_so(settings, path):
    settings.DEBUG = True  # the portal's page even where Django would show its debug 404
    client = Client()
    client.force_login(PlatformAdminFactory())
    response = client.get(path)
    html = response.content.decode()
    assert response.status_code == 404
    assert [t.name for t in response.templates][0] == "sso/not_configured.html"
    assert "Single sign-on is not set up" in html and 'href="/login/"' in html
    assert "Page not found" not in html and "URLconf" not in html


def test_with_an_issuer_sso_start_leads_to_the_sign_in(settings):
    enable_sso(settings, "http://idp.invalid")
    response = Client().get("/sso/?next=/jobs/")
    assert response.status_code == 302 and response["Location"] == "/sso/login/?next=%2Fjobs%2F"


def test_with_an_issuer_the_login_page_offers_sso_and_passwords(settings):
    enable_sso(settings, "http://idp.invalid")
    html = Client().get("/login/?next=/jobs/").content.decode()
    assert 'href="/sso/login/?next=/jobs/"' in html and "Sign in with SSO" in html
    assert 'id="id_password"' in html


def test_password_login_off_hides_the_form_and_refuses_passwords(settings):
    enable_sso(settings, "http://idp.invalid")
    settings.PASSWORD_LOGIN_ENABLED = False
    settings.AUTHENTICATION_BACKENDS = [
        b for b in settings.AUTHENTICATION_BACKENDS if not b.endswith("ModelBackend")
    ]
    UserFactory(username="local", password="right-password-1")
    client = Client()
    html = client.get("/login/").content.decode()
    assert "Sign in with SSO" in html and 'id="id_password"' not in html
    client.post("/login/", {"username": "local", "password": "right-password-1"})
    assert not client.get("/").wsgi_request.user.is_authenticated


def test_password_login_still_works_next_to_sso(settings):
    enable_sso(settings, "http://idp.invalid")
    UserFactory(username="local", password="right-password-1")
    client = Client()
    response = client.post("/login/", {"username": "local", "password": "right-password-1"})
    assert response.status_code == 302
    assert client.get("/").wsgi_request.user.username == "local"


def test_a_team_role_mapping_needs_a_team_and_a_global_one_none():
    team = TeamFactory(slug="vision")
    with pytest.raises(IntegrityError), transaction.atomic():
        GroupMapping.objects.create(group="g", role=TeamRole.MEMBER, team=None)
    GroupMapping.objects.create(group="g", role=TeamRole.MEMBER, team=team)
    with pytest.raises(IntegrityError), transaction.atomic():
        GroupMapping.objects.create(group="g", role="finance", team=team)
