"""An IdP account is recognised by issuer + subject only. A first sign-in never takes over an
existing portal user, whatever username or e-mail the IdP sends; an existing user is joined to an
IdP account only by an explicit, audited step: the user, signed in with their password, links
their own IdP account, or a platform admin links it. Against the real provider process."""

from urllib.parse import urlparse

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.sso.models import SsoIdentity
from apps.teams.choices import GlobalRole, TeamRole
from apps.teams.models import User
from tests.factories import TEST_PASSWORD, MembershipFactory, PlatformAdminFactory, UserFactory
from tests.sso.test_login import claims, finish, memberships, refused, sign_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def fran(teams):
    """The local finance user fran, team admin of nlp (a team the IdP's groups manage)."""
    fran = UserFactory(username="fran", email="fran@finance.example", global_role="finance")
    MembershipFactory(user=fran, team=teams["nlp"], role=TeamRole.TEAM_ADMIN)
    return fran


def password_client(user) -> Client:
    client = Client()
    response = client.post("/login/", {"username": user.username, "password": TEST_PASSWORD})
    assert response.status_code == 302
    return client


def test_idp_account_named_like_a_local_user_gets_its_own_account_not_the_local_one(
    sso, teams, fran
):
    sso.set_user(
        "sub-evil-fran",
        {**claims("fran", groups=["gpu-vision"]), "email": "evil@attacker.example"},
    )
    evil = Client()
    assert sign_in(evil, sso, "sub-evil-fran").status_code == 302

    signed_in = evil.get("/").wsgi_request.user
    assert signed_in.pk != fran.pk and signed_in.username == "fran-sso"
    assert signed_in.email == "evil@attacker.example"
    assert evil.get("/billing/").status_code == 403
    fran.refresh_from_db()
    assert (fran.email, fran.global_role) == ("fran@finance.example", GlobalRole.FINANCE)
    assert fran.has_usable_password()
    assert memberships("fran") == {"nlp": TeamRole.TEAM_ADMIN}
    assert memberships("fran-sso") == {"vision": TeamRole.MEMBER}
    assert not SsoIdentity.objects.filter(user=fran).exists()
    assert SsoIdentity.objects.get(subject="sub-evil-fran").user == signed_in
    created = AuditEvent.objects.get(action="user.create")
    assert created.after == {"username": "fran-sso", "idp_username": "fran"}
    assert "belongs to another portal user" in created.reason


def test_the_account_of_a_colliding_name_keeps_its_own_name_at_later_sign_ins(sso, teams, fran):
    sso.set_user("sub-evil-fran", claims("fran", groups=["gpu-vision"]))
    sign_in(Client(), sso, "sub-evil-fran")
    UserFactory(username="fran-sso-taken-check")  # unrelated; names are matched exactly
    again = Client()
    assert sign_in(again, sso, "sub-evil-fran").status_code == 302
    assert again.get("/").wsgi_request.user.username == "fran-sso"
    assert User.objects.filter(username__startswith="fran").count() == 3
    # A third IdP account called fran gets the next free name.
    sso.set_user("sub-other-fran", claims("fran", groups=["gpu-vision"]))
    third = Client()
    sign_in(third, sso, "sub-other-fran")
    assert third.get("/").wsgi_request.user.username == "fran-sso-2"


def test_a_locally_signed_in_user_links_their_own_idp_account_after_confirming_the_password(
    sso, teams, fran
):
    sso.set_user("sub-fran", claims("fran.smith", groups=["gpu-nlp-admins", "gpu-finance"]))
    client = password_client(fran)
    page = client.get("/sso/link/")
    assert page.status_code == 200 and "Link my SSO account" in page.content.decode()

    start = client.post("/sso/link/", {"password": TEST_PASSWORD})
    assert start.status_code == 302
    assert urlparse(start["Location"]).path == "/oauth2/authorize"
    done = finish(client, sso.authorize(start["Location"], "sub-fran"))
    assert done.status_code == 302 and done["Location"] == "/sso/link/"

    identity = SsoIdentity.objects.get(subject="sub-fran")
    assert identity.user == fran and identity.issuer == sso.url
    link = AuditEvent.objects.get(action="sso_identity.link")
    assert link.actor == fran and link.after["subject"] == "sub-fran"
    assert "signed in with their password" in link.reason
    assert 'data-testid="sso-linked"' in client.get("/sso/link/").content.decode()
    # From now on signing in with SSO is signing in as fran (renamed after the IdP).
    sso_client = Client()
    sign_in(sso_client, sso, "sub-fran")
    assert sso_client.get("/").wsgi_request.user.pk == fran.pk
    assert User.objects.get(pk=fran.pk).username == "fran.smith"
    assert memberships("fran.smith") == {"nlp": TeamRole.TEAM_ADMIN}


def test_linking_needs_the_right_password_and_writes_nothing_without_it(sso, teams, fran):
    client = password_client(fran)
    response = client.post("/sso/link/", {"password": "not-her-password"})
    assert response.status_code == 400
    assert "not your password" in response.content.decode()
    assert "sso_link" not in client.session
    assert not SsoIdentity.objects.exists()
    assert not AuditEvent.objects.filter(action="sso_identity.link").exists()


def test_linking_needs_a_signed_in_user(sso, teams):
    response = Client().post("/sso/link/", {"password": "x"})
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_an_idp_account_of_another_user_cannot_be_linked_by_the_user(sso, teams, fran):
    sso.set_user("sub-carol", claims("carol", groups=["gpu-vision"]))
    sign_in(Client(), sso, "sub-carol")
    carol = User.objects.get(username="carol")
    client = password_client(fran)
    start = client.post("/sso/link/", {"password": TEST_PASSWORD})
    refused(finish(client, sso.authorize(start["Location"], "sub-carol")), "identity_taken", 403)
    assert SsoIdentity.objects.get(subject="sub-carol").user == carol
    assert not SsoIdentity.objects.filter(user=fran).exists()
    assert memberships("fran") == {"nlp": TeamRole.TEAM_ADMIN}
    # fran is still signed in with her password; nothing else happened to her session.
    assert client.get("/").wsgi_request.user.pk == fran.pk


def test_a_platform_admin_moves_an_idp_account_to_the_existing_user_and_it_is_audited(
    sso, teams, fran
):
    sso.set_user("sub-fran", claims("fran", groups=["gpu-nlp-admins"]))
    first = Client()
    sign_in(first, sso, "sub-fran")
    assert first.get("/").wsgi_request.user.username == "fran-sso"

    admin = PlatformAdminFactory(username="ada")
    client = Client()
    client.force_login(admin)
    assert client.get("/sso/identities/link/").status_code == 200
    response = client.post(
        "/sso/identities/link/",
        {"username": "fran", "subject": "sub-fran", "reason": "ticket 42"},
    )
    assert response.status_code == 302
    assert SsoIdentity.objects.get(subject="sub-fran").user == fran
    event = AuditEvent.objects.get(action="sso_identity.link")
    assert event.actor == admin and event.reason == "ticket 42"
    assert event.before == {"user": "fran-sso"} and event.after["user"] == "fran"
    # The browser signed in as fran-sso through that account is signed out.
    assert not first.get("/").wsgi_request.user.is_authenticated
    again = Client()
    sign_in(again, sso, "sub-fran")
    assert again.get("/").wsgi_request.user.pk == fran.pk


def test_only_platform_admins_link_accounts_and_bad_input_is_refused(sso, teams, fran):
    client = Client()
    client.force_login(fran)  # finance, not platform admin
    assert (
        client.post("/sso/identities/link/", {"username": "fran", "subject": "s"}).status_code
        == 403
    )

    client.force_login(PlatformAdminFactory(username="ada"))
    unknown = client.post("/sso/identities/link/", {"username": "nobody", "subject": "s"})
    assert unknown.status_code == 400 and "No portal user" in unknown.content.decode()
    empty = client.post("/sso/identities/link/", {"username": "fran", "subject": "  "})
    assert empty.status_code == 400
    assert not SsoIdentity.objects.exists()
    assert not AuditEvent.objects.filter(action="sso_identity.link").exists()
