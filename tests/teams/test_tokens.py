"""Named API tokens: several per user, shown once, stored hashed, scoped, expiring, revocable;
the old single token's keys keep working through the transition."""

import hashlib
import re
from datetime import timedelta

import pytest
from django.contrib.sessions.models import Session
from django.core.cache import cache
from django.test import Client, override_settings
from django.utils import timezone
from rest_framework.authtoken.models import Token

from apps.audit.models import AuditEvent
from apps.teams.choices import ApiTokenScope
from apps.teams.models import ApiToken
from apps.teams.token_views import NEW_KEY_COOKIE, NEW_KEY_SESSION
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_throttle():
    cache.clear()
    yield
    cache.clear()


def _page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def create(page: Client, name: str, scope: str = ApiTokenScope.READ_ONLY, days: int = 30) -> str:
    """Create a token on the page; returns the key the page shows once."""
    response = page.post(
        "/teams/token/", {"name": name, "scope": scope, "expires_in_days": days}, follow=True
    )
    assert response.status_code == 200
    match = re.search(r'data-testid="api-token">([^<]+)<', response.text)
    assert match, response.text
    return match.group(1)


def api(key: str, method: str = "get", path: str = "/api/v1/teams/", **data):
    client = Client()
    return getattr(client, method)(
        path, data, content_type="application/json", HTTP_AUTHORIZATION=f"Token {key}"
    )


def test_a_new_token_is_shown_once_and_only_its_digest_is_stored(member):
    page = _page(member)
    key = create(page, "nightly-eval")
    token = ApiToken.objects.get(user=member, name="nightly-eval")
    assert token.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in {token.key_hash, token.prefix} and key.startswith(token.prefix)
    again = page.get("/teams/token/").text
    assert key not in again
    assert "nightly-eval" in again and token.prefix in again
    assert api(key).status_code == 200


def _session_store_text() -> str:
    """Everything the session store holds, raw and decoded."""
    return "\n".join(
        f"{session.session_data}\n{session.get_decoded()}" for session in Session.objects.all()
    )


def test_a_new_key_never_sits_in_the_session_and_is_shown_once(member):
    page = _page(member)
    created = page.post(
        "/teams/token/", {"name": "nightly-eval", "scope": "read", "expires_in_days": 30}
    )
    assert created.status_code == 302
    # Between the create and the page that shows the key, the session store holds only the
    # key XOR a pad that the browser holds: no trace of the key itself.
    stored = _session_store_text()
    assert Session.objects.exists() and NEW_KEY_SESSION in stored

    shown = page.get(created["Location"])
    [key] = re.findall(r'data-testid="api-token">([^<]+)<', shown.text)
    assert api(key).status_code == 200
    prefix = ApiToken.objects.get(user=member).prefix
    for trace in (key, key[len(prefix) :], key.encode().hex()):
        assert trace not in stored
        assert trace not in _session_store_text()
    assert NEW_KEY_SESSION not in _session_store_text()
    assert "no-store" in shown["Cache-Control"]
    assert shown.cookies[NEW_KEY_COOKIE].value == ""  # the browser's half is deleted too

    again = page.get("/teams/token/")
    assert again.status_code == 200 and "nightly-eval" in again.text
    assert key not in again.text and 'data-testid="api-token"' not in again.text


def test_a_lost_or_edited_pad_shows_no_key_and_no_error(member):
    for pad in (None, "zz-not-hex", "00" * 5):
        page = _page(member)
        created = page.post(
            "/teams/token/", {"name": f"t-{pad}", "scope": "read", "expires_in_days": 30}
        )
        if pad is None:
            del page.cookies[NEW_KEY_COOKIE]
        else:
            page.cookies[NEW_KEY_COOKIE] = pad
        shown = page.get(created["Location"])
        assert shown.status_code == 200 and 'data-testid="api-token"' not in shown.text
        assert NEW_KEY_SESSION not in _session_store_text()


def test_a_user_has_several_named_tokens_and_names_are_unique_among_active_ones(member):
    page = _page(member)
    first, second = create(page, "ci"), create(page, "notebook")
    assert first != second
    assert api(first).status_code == 200 and api(second).status_code == 200
    duplicate = page.post("/teams/token/", {"name": "ci", "scope": "read", "expires_in_days": 30})
    assert duplicate.status_code == 400
    assert "already have a token named “ci”" in duplicate.text
    assert ApiToken.objects.filter(user=member).count() == 2


def test_bad_create_input_is_refused_inline_and_nothing_is_made(member):
    page = _page(member)
    for data in (
        {"name": "", "scope": "read", "expires_in_days": 30},
        {"name": "x", "scope": "admin", "expires_in_days": 30},
        {"name": "x", "scope": "read", "expires_in_days": 5000},
    ):
        response = page.post("/teams/token/", data)
        assert response.status_code == 400
        assert 'role="alert"' in response.text
    assert not ApiToken.objects.exists()


def test_read_only_token_reads_but_is_refused_on_writes_with_403(member, team):
    key = create(_page(member), "dashboards", scope=ApiTokenScope.READ_ONLY)
    assert api(key).status_code == 200
    refused = api(key, "post", "/api/v1/reservations/", team="vision")
    assert refused.status_code == 403
    assert refused.json()["code"] == "token_read_only"
    # The same request with a read-write token gets past authentication to validation.
    writer = create(_page(member), "booker", scope=ApiTokenScope.READ_WRITE)
    assert api(writer, "post", "/api/v1/reservations/", team="vision").status_code == 400


def test_a_token_expires(member):
    key = create(_page(member), "short", days=7)
    token = ApiToken.objects.get(name="short")
    assert token.expires_at - timezone.now() > timedelta(days=6, hours=23)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = api(key)
    assert response.status_code == 401
    assert "has expired" in response.json()["message"]
    assert "expired" in _page(member).get("/teams/token/").text


def test_a_revoked_token_stops_working_and_revoking_is_audited(member):
    page = _page(member)
    key = create(page, "old-script")
    token = ApiToken.objects.get(name="old-script")
    response = page.post(f"/teams/token/{token.pk}/revoke/", follow=True)
    assert "revoked: it no longer works" in response.text
    assert api(key).status_code == 401
    event = AuditEvent.objects.get(action="api_token.revoke")
    assert event.actor == member and event.before["name"] == "old-script"
    assert AuditEvent.objects.filter(action="api_token.create").count() == 1


def test_another_users_token_cannot_be_revoked(member):
    key = create(_page(member), "mine")
    token = ApiToken.objects.get(name="mine")
    other = _page(UserFactory(username="mallory"))
    assert other.post(f"/teams/token/{token.pk}/revoke/").status_code == 404
    assert api(key).status_code == 200


def test_tokens_of_a_deactivated_user_stop_working(member):
    key = create(_page(member), "ci")
    member.is_active = False
    member.save()
    assert api(key).status_code == 401


def test_last_used_time_is_recorded(member):
    key = create(_page(member), "ci")
    token = ApiToken.objects.get(name="ci")
    assert token.last_used_at is None
    before = timezone.now()
    api(key)
    token.refresh_from_db()
    assert token.last_used_at >= before
    # Within a minute a second use writes nothing.
    first = token.last_used_at
    api(key)
    token.refresh_from_db()
    assert token.last_used_at == first


@override_settings(API_TOKEN_FAILURE_THROTTLE="2/min")
def test_revoked_and_expired_tokens_count_towards_the_guessing_throttle(member):
    page = _page(member)
    good = create(page, "good")
    revoked = create(page, "revoked")
    ApiToken.objects.filter(name="revoked").update(revoked_at=timezone.now())
    assert [api(revoked).status_code for _ in range(2)] == [401, 401]
    assert api(good).status_code == 429


def test_a_legacy_token_works_until_legacy_tokens_are_turned_off(member, settings):
    legacy = Token.objects.create(user=member).key
    assert api(legacy).status_code == 200
    settings.API_LEGACY_TOKENS = False
    assert api(legacy).status_code == 401


def test_the_page_lists_tokens_with_scope_expiry_and_state(member):
    page = _page(member)
    create(page, "reader", scope=ApiTokenScope.READ_ONLY)
    create(page, "writer", scope=ApiTokenScope.READ_WRITE)
    html = page.get("/teams/token/").text
    rows = re.findall(r'data-token-name="([^"]+)"(.*?)</tr>', html, re.S)
    by_name = dict(rows)
    assert set(by_name) == {"reader", "writer"}
    assert "Read only" in by_name["reader"] and "Read and write" in by_name["writer"]
    assert all("active" in row for row in by_name.values())
