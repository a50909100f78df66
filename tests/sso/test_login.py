"""OpenID Connect sign-in against a real provider process (oidc-provider-mock, started by the
tests): users and teams from the ID token, and every way a sign-in must be refused."""

import base64
import hashlib
from urllib.parse import parse_qs, urlparse

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.test import Client

from apps.audit.models import AuditEvent
from apps.sso.models import SsoIdentity
from apps.teams.choices import GlobalRole, TeamRole
from apps.teams.models import Membership, User
from tests.factories import MembershipFactory, UserFactory
from tests.sso.conftest import CLIENT_ID, enable_sso
from tests.sso.provider import TokenRelay, start_provider, stop_provider

pytestmark = pytest.mark.django_db


def claims(username="carol", groups=("gpu-vision",), **extra) -> dict:
    return {
        "preferred_username": username,
        "email": f"{username}@example.org",
        "given_name": username.title(),
        "family_name": "Tester",
        "groups": list(groups),
        **extra,
    }


def start_sign_in(client: Client) -> str:
    response = client.get("/sso/login/")
    assert response.status_code == 302
    return response["Location"]


def finish(client: Client, back: str):
    parsed = urlparse(back)
    return client.get(f"{parsed.path}?{parsed.query}")


def sign_in(client: Client, provider, sub: str):
    return finish(client, provider.authorize(start_sign_in(client), sub))


def memberships(username: str) -> dict[str, str]:
    return dict(
        Membership.objects.filter(user__username=username).values_list("team__slug", "role")
    )


def refused(response, code: str, status: int = 400) -> str:
    assert response.status_code == status
    html = response.content.decode()
    assert f'data-code="{code}"' in html
    assert "No portal account was created" in html
    return html


def test_first_sign_in_creates_the_user_from_claims_with_teams_from_groups(sso, teams):
    sso.set_user("sub-carol", claims(groups=["gpu-vision", "not-mapped"]))
    client = Client()
    response = sign_in(client, sso, "sub-carol")
    assert response.status_code == 302 and response["Location"] == "/"
    home = client.get("/")
    assert home.wsgi_request.user.username == "carol"
    carol = User.objects.get(username="carol")
    assert (carol.email, carol.first_name, carol.last_name) == (
        "carol@example.org",
        "Carol",
        "Tester",
    )
    assert not carol.has_usable_password()
    assert memberships("carol") == {"vision": TeamRole.MEMBER}
    identity = SsoIdentity.objects.get(user=carol)
    assert (identity.issuer, identity.subject) == (sso.url, "sub-carol")
    added = AuditEvent.objects.get(action="membership.add")
    assert added.after == {"user": "carol", "role": "member"}
    assert added.actor_name == "system" and "gpu-vision" in added.reason


def test_second_sign_in_after_a_group_change_moves_the_user_between_teams(sso, teams):
    sso.set_user("sub-carol", claims(groups=["gpu-vision"]))
    sign_in(Client(), sso, "sub-carol")
    carol = User.objects.get(username="carol")
    # A membership in a team no group maps to is managed in the portal and must survive.
    MembershipFactory(user=carol, team=teams["scratch"], role=TeamRole.MEMBER)

    sso.set_user("sub-carol", claims(groups=["gpu-nlp-admins", "gpu-nlp"]))
    response = sign_in(Client(), sso, "sub-carol")

    assert response.status_code == 302
    assert memberships("carol") == {"nlp": TeamRole.TEAM_ADMIN, "scratch": TeamRole.MEMBER}
    assert User.objects.filter(username="carol").count() == 1
    removed = AuditEvent.objects.get(action="membership.remove")
    assert removed.object_repr == "vision" and removed.before == {"user": "carol", "role": "member"}
    added = AuditEvent.objects.filter(action="membership.add").order_by("pk").last()
    assert added.object_repr == "nlp" and added.after == {"user": "carol", "role": "team_admin"}


def test_role_change_inside_a_team_follows_the_groups_and_is_audited(sso, teams):
    sso.set_user("sub-carol", claims(groups=["gpu-nlp"]))
    sign_in(Client(), sso, "sub-carol")
    sso.set_user("sub-carol", claims(groups=["gpu-nlp", "gpu-nlp-admins"]))
    sign_in(Client(), sso, "sub-carol")
    assert memberships("carol") == {"nlp": TeamRole.TEAM_ADMIN}
    change = AuditEvent.objects.get(action="membership.change_role")
    assert change.before["role"] == "member" and change.after["role"] == "team_admin"


def test_finance_role_comes_from_a_group_and_goes_when_the_group_goes(sso, teams):
    sso.set_user("sub-fin", claims("fiona", groups=["gpu-finance"]))
    sign_in(Client(), sso, "sub-fin")
    assert User.objects.get(username="fiona").global_role == GlobalRole.FINANCE
    sso.set_user("sub-fin", claims("fiona", groups=["gpu-vision"]))
    sign_in(Client(), sso, "sub-fin")
    fiona = User.objects.get(username="fiona")
    assert fiona.global_role == GlobalRole.NONE
    events = AuditEvent.objects.filter(action="user.change_global_role").order_by("pk")
    assert [e.after["global_role"] for e in events] == ["finance", ""]


def test_groups_that_map_to_nothing_get_a_clear_page_and_no_account(sso, teams):
    sso.set_user("sub-dan", claims("dan", groups=["marketing"]))
    response = sign_in(Client(), sso, "sub-dan")
    html = refused(response, "no_mapped_groups", status=403)
    assert "none of your groups" in html
    assert not User.objects.filter(username="dan").exists()
    assert not SsoIdentity.objects.exists()


def test_missing_email_claim_is_refused_with_a_clear_page(sso, teams):
    sso.set_user("sub-eve", {"preferred_username": "eve", "groups": ["gpu-vision"]})
    response = sign_in(Client(), sso, "sub-eve")
    html = refused(response, "missing_claims")
    assert "“email”" in html
    assert not User.objects.filter(username="eve").exists()


def test_deactivated_user_cannot_sign_in_and_loses_an_open_session(sso, teams):
    sso.set_user("sub-carol", claims(groups=["gpu-vision"]))
    signed_in = Client()
    sign_in(signed_in, sso, "sub-carol")
    assert signed_in.get("/").wsgi_request.user.username == "carol"
    User.objects.filter(username="carol").update(is_active=False)
    assert not signed_in.get("/").wsgi_request.user.is_authenticated
    client = Client()
    refused(sign_in(client, sso, "sub-carol"), "account_disabled", status=403)
    assert not client.get("/").wsgi_request.user.is_authenticated


def test_a_local_superuser_is_not_taken_over_by_an_idp_account_of_the_same_name(sso, teams):
    root = UserFactory(username="root", is_superuser=True, is_staff=True)
    sso.set_user("sub-root", claims("root", groups=["gpu-vision"]))
    client = Client()
    assert sign_in(client, sso, "sub-root").status_code == 302
    assert client.get("/").wsgi_request.user.username == "root-sso"
    assert not SsoIdentity.objects.filter(user=root).exists()
    root.refresh_from_db()
    assert root.email == "root@example.com" and root.has_usable_password()


def test_a_renamed_idp_account_stays_the_same_portal_user(sso, teams):
    sso.set_user("sub-carol", claims("carol"))
    sign_in(Client(), sso, "sub-carol")
    first = User.objects.get(username="carol").pk
    sso.set_user("sub-carol", claims("carol.tester"))
    sign_in(Client(), sso, "sub-carol")
    assert User.objects.get(username="carol.tester").pk == first


def test_authorization_uses_pkce_s256_and_sends_the_verifier(sso, teams, token_relay):
    sso.set_user("sub-carol", claims())
    client = Client()
    authorize = start_sign_in(client)
    query = parse_qs(urlparse(authorize).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["nonce"][0] and query["state"][0]
    assert finish(client, sso.authorize(authorize, "sub-carol")).status_code == 302
    verifier = token_relay.requests_seen[-1]["code_verifier"]
    digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    assert digest.decode() == query["code_challenge"][0]


def _claims_of(id_token: str) -> dict:
    return jwt.decode(id_token, options={"verify_signature": False})


def test_id_token_with_a_bad_signature_is_refused_and_logged(sso, teams, token_relay, caplog):
    forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = forger.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )

    def forge(answer, form):
        # Same claims (right issuer, audience, nonce), signed by someone else's key.
        answer["id_token"] = jwt.encode(_claims_of(answer["id_token"]), pem, algorithm="RS256")
        return answer

    token_relay.tamper = forge
    sso.set_user("sub-carol", claims())
    client = Client()
    with caplog.at_level("WARNING", logger="apps.sso"):
        refused(sign_in(client, sso, "sub-carol"), "bad_signature")
    assert "sso sign-in refused: bad_signature" in caplog.text
    assert not User.objects.filter(username="carol").exists()
    assert not client.get("/").wsgi_request.user.is_authenticated


def test_id_token_for_another_application_is_refused(sso, teams, token_relay):
    def other_audience(answer, form):
        genuine = _claims_of(answer["id_token"])
        return sso.tokens_for(sub=genuine["sub"], client_id="another-app", nonce=genuine["nonce"])

    token_relay.tamper = other_audience
    sso.set_user("sub-carol", claims())
    refused(sign_in(Client(), sso, "sub-carol"), "wrong_audience")
    assert not User.objects.filter(username="carol").exists()


def test_id_token_from_an_unknown_issuer_is_refused(sso, teams, token_relay):
    # The same provider reached under another name signs with its key but names that issuer.
    other_issuer = sso.url.replace("127.0.0.1", "localhost")

    def other_issuer_token(answer, form):
        genuine = _claims_of(answer["id_token"])
        return sso.tokens_for(
            sub=genuine["sub"], client_id=CLIENT_ID, nonce=genuine["nonce"], base_url=other_issuer
        )

    token_relay.tamper = other_issuer_token
    sso.set_user("sub-carol", claims())
    refused(sign_in(Client(), sso, "sub-carol"), "wrong_issuer")
    assert not User.objects.filter(username="carol").exists()


def test_id_token_with_another_nonce_is_refused(sso, teams, token_relay):
    def replayed(answer, form):
        genuine = _claims_of(answer["id_token"])
        return sso.tokens_for(sub=genuine["sub"], client_id=CLIENT_ID, nonce="from-another-login")

    token_relay.tamper = replayed
    sso.set_user("sub-carol", claims())
    refused(sign_in(Client(), sso, "sub-carol"), "nonce_mismatch")
    assert not User.objects.filter(username="carol").exists()


def test_wrong_or_reused_state_is_refused(sso, teams):
    sso.set_user("sub-carol", claims())
    client = Client()
    back = sso.authorize(start_sign_in(client), "sub-carol")
    forged = back.replace("state=", "state=x")
    refused(finish(client, forged), "state_mismatch")
    assert not User.objects.filter(username="carol").exists()
    # The genuine answer still works once, and never twice.
    assert finish(client, back).status_code == 302
    refused(finish(Client(), back), "state_mismatch")


def test_a_state_from_another_browser_is_refused(sso, teams):
    sso.set_user("sub-carol", claims())
    back = sso.authorize(start_sign_in(Client()), "sub-carol")
    refused(finish(Client(), back), "state_mismatch")
    assert not User.objects.filter(username="carol").exists()


def test_provider_refusal_is_shown(sso, teams):
    client = Client()
    state = parse_qs(urlparse(start_sign_in(client)).query)["state"][0]
    response = client.get(f"/sso/callback/?error=access_denied&state={state}")
    assert "did not sign you in: access_denied" in refused(response, "idp_refused")


@pytest.fixture
def short_lived_provider(settings):
    provider = start_provider("--require-nonce", "--token-max-age", "1")
    enable_sso(settings, provider.url)
    settings.OIDC_CLOCK_SKEW_SECONDS = 0
    yield provider
    stop_provider(provider)


def test_expired_id_token_is_refused(short_lived_provider, teams):
    from apps.sso import discovery

    metadata = dict(discovery.provider_metadata())
    relay = TokenRelay(target=metadata["token_endpoint"], delay=2.5).start()
    metadata["token_endpoint"] = relay.url
    discovery._cache[short_lived_provider.url] = (float("inf"), metadata)
    try:
        short_lived_provider.set_user("sub-carol", claims())
        refused(sign_in(Client(), short_lived_provider, "sub-carol"), "token_expired")
    finally:
        relay.stop()
    assert not User.objects.filter(username="carol").exists()


def test_unreachable_provider_gets_a_clear_page(settings, teams):
    from tests.sso.provider import free_port

    enable_sso(settings, f"http://127.0.0.1:{free_port()}")
    response = Client().get("/sso/login/")
    assert response.status_code == 503
    assert 'data-code="idp_unavailable"' in response.content.decode()


def test_logout_after_sso_ends_the_session_at_the_provider(sso, teams):
    sso.set_user("sub-carol", claims())
    client = Client()
    sign_in(client, sso, "sub-carol")
    response = client.post("/logout/")
    assert response.status_code == 302
    location = urlparse(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == (
        f"{sso.url}/oauth2/end_session"
    )
    hint = parse_qs(location.query)["id_token_hint"][0]
    assert _claims_of(hint)["sub"] == "sub-carol"
    assert not client.get("/").wsgi_request.user.is_authenticated
