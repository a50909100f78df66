"""Password guessing is stopped: django-axes locks a username out at one address after
LOGIN_FAILURE_LIMIT failures, audited; API token guessing is throttled per address."""

import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token

from apps.audit.models import AuditEvent
from apps.audit.receivers import LOGIN_LOCKED_OUT
from tests.factories import TEST_PASSWORD, UserFactory

ATTACKER = "203.0.113.7"
ELSEWHERE = "198.51.100.20"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def empty_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def alice():
    return UserFactory(username="alice")


def log_in(password: str, *, username: str = "alice", address: str = ATTACKER):
    client = Client(REMOTE_ADDR=address)
    response = client.post("/login/", {"username": username, "password": password})
    return client, response


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def guess_until_locked(username: str = "alice", address: str = ATTACKER):
    responses = [
        log_in(f"wrong-{n}", username=username, address=address)[1]
        for n in range(settings.AXES_FAILURE_LIMIT)
    ]
    return responses


def test_ten_wrong_passwords_lock_the_user_out_at_that_address(alice):
    assert settings.AXES_FAILURE_LIMIT == 10
    responses = guess_until_locked()
    # The first nine are ordinary failures; the tenth locks.
    assert [r.status_code for r in responses[:-1]] == [200] * 9
    assert b"Please enter a correct username and password" in responses[0].content
    assert responses[-1].status_code == 429

    client, response = log_in(TEST_PASSWORD)
    assert response.status_code == 429
    assert not logged_in(client)
    page = response.content.decode()
    assert 'data-testid="login-locked"' in page
    assert "Too many failed log-ins" in page
    assert "even with the right password" in page
    assert "15 minutes" in page


def test_a_lockout_is_audited_once(alice):
    guess_until_locked()
    log_in("still-wrong")
    log_in(TEST_PASSWORD)
    [event] = AuditEvent.objects.filter(action=LOGIN_LOCKED_OUT)
    assert event.actor is None and event.actor_name == "system"
    assert (event.object_type, event.object_id) == ("teams.user", str(alice.pk))
    assert event.after["ip_address"] == ATTACKER
    assert event.after["username"] == "alice"
    assert event.after["failures"] == settings.AXES_FAILURE_LIMIT
    assert event.after["scope"] == "user"


def test_a_lockout_after_an_unlock_is_audited_again(alice):
    guess_until_locked()
    call_command("axes_reset")  # a platform admin unlocks the login
    client, response = log_in(TEST_PASSWORD)
    assert response.status_code == 302 and logged_in(client)
    guess_until_locked()
    log_in("still-wrong")  # refused while locked: not a new lockout
    call_command("axes_reset_username", "alice")
    guess_until_locked()
    events = AuditEvent.objects.filter(action=LOGIN_LOCKED_OUT).order_by("pk")
    assert [(e.after["scope"], e.after["failures"]) for e in events] == [("user", 10)] * 3


def test_a_lockout_of_an_unknown_username_is_audited_too():
    guess_until_locked(username="nobody")
    [event] = AuditEvent.objects.filter(action=LOGIN_LOCKED_OUT)
    assert event.object_type == "axes.accessattempt"
    assert event.after["username"] == "nobody"


def test_other_users_and_other_addresses_are_not_locked(alice):
    UserFactory(username="bob")
    guess_until_locked()

    client, response = log_in(TEST_PASSWORD, username="bob", address=ATTACKER)
    assert response.status_code == 302 and logged_in(client)
    client, response = log_in(TEST_PASSWORD, username="alice", address=ELSEWHERE)
    assert response.status_code == 302 and logged_in(client)


def test_the_login_works_again_after_the_cool_off(alice):
    with override_settings(AXES_COOLOFF_TIME=timedelta(seconds=2)):
        guess_until_locked()
        client, response = log_in(TEST_PASSWORD)
        assert response.status_code == 429
        time.sleep(2.2)
        client, response = log_in(TEST_PASSWORD)
    assert response.status_code == 302
    assert logged_in(client)


def test_a_success_before_the_limit_resets_the_count(alice):
    for n in range(settings.AXES_FAILURE_LIMIT - 1):
        log_in(f"wrong-{n}")
    client, response = log_in(TEST_PASSWORD)
    assert response.status_code == 302
    for n in range(settings.AXES_FAILURE_LIMIT - 1):
        log_in(f"wrong-again-{n}")
    client, response = log_in(TEST_PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_the_admin_login_is_locked_as_well(alice):
    guess_until_locked()
    client = Client(REMOTE_ADDR=ATTACKER)
    response = client.post(
        "/admin/login/", {"username": "alice", "password": TEST_PASSWORD, "next": "/admin/"}
    )
    assert response.status_code == 429
    assert not logged_in(client)


# --- API tokens -----------------------------------------------------------------------------


def api_get(token: str, *, address: str = ATTACKER):
    return Client(REMOTE_ADDR=address).get("/api/v1/teams/", HTTP_AUTHORIZATION=f"Token {token}")


@override_settings(API_TOKEN_FAILURE_THROTTLE="3/min")
def test_failed_token_attempts_are_throttled_per_address(alice):
    good = Token.objects.create(user=alice).key
    assert [api_get(f"guess{n:036d}").status_code for n in range(3)] == [401] * 3

    refused = api_get("guess-four")
    assert refused.status_code == 429
    body = refused.json()
    assert set(body) == {"code", "message", "detail"} and body["code"] == "throttled"
    assert int(refused["Retry-After"]) <= 60
    # Once throttled, a right token from that address is refused too: guessing stays blind.
    assert api_get(good).status_code == 429
    # Other addresses are not affected.
    assert api_get(good, address=ELSEWHERE).status_code == 200


@override_settings(API_TOKEN_FAILURE_THROTTLE="3/min")
def test_good_tokens_do_not_count_as_failures(alice):
    good = Token.objects.create(user=alice).key
    assert [api_get(good).status_code for _ in range(6)] == [200] * 6


# --- password spraying ----------------------------------------------------------------------


@override_settings(LOGIN_ADDRESS_FAILURE_LIMIT=20)
def test_spraying_many_usernames_from_one_address_locks_the_address(alice):
    UserFactory(username="bob")
    # Two guesses each for fifteen names: no pair comes near its limit of ten.
    for n in range(15):
        for guess in ("Winter2026!", "Password1"):
            log_in(guess, username=f"staff{n}")
    client, response = log_in(TEST_PASSWORD, username="bob")
    assert response.status_code == 429 and not logged_in(client)
    assert "Too many failed log-ins from your address" in response.content.decode()
    # The same users elsewhere are not affected.
    client, response = log_in(TEST_PASSWORD, username="bob", address=ELSEWHERE)
    assert response.status_code == 302 and logged_in(client)
    [event] = AuditEvent.objects.filter(action=LOGIN_LOCKED_OUT)
    assert event.after["scope"] == "address" and event.after["ip_address"] == ATTACKER


@override_settings(LOGIN_ADDRESS_FAILURE_LIMIT=20)
def test_an_address_lockout_records_the_addresss_true_failure_count(alice):
    for n in range(19):
        log_in("wrong", username=f"typo{n}")
    assert not AuditEvent.objects.filter(action=LOGIN_LOCKED_OUT).exists()
    log_in("wrong", username="alice")
    log_in(TEST_PASSWORD, username="alice")  # refused while locked: not a new lockout
    [event] = AuditEvent.objects.filter(action=LOGIN_LOCKED_OUT)
    assert event.after["scope"] == "address"
    assert event.after["failures"] == 20  # not scaled onto the user limit of 10
    assert event.reason == "Too many failed log-ins from this address"


@override_settings(LOGIN_ADDRESS_FAILURE_LIMIT=20)
def test_a_user_lockout_then_the_address_lockout_are_two_events(alice):
    guess_until_locked()
    for n in range(10):
        log_in("wrong", username=f"typo{n}")
    events = AuditEvent.objects.filter(action=LOGIN_LOCKED_OUT).order_by("pk")
    assert [(e.after["scope"], e.after["failures"]) for e in events] == [
        ("user", 10),
        ("address", 20),
    ]


@override_settings(LOGIN_ADDRESS_FAILURE_LIMIT=20)
def test_an_address_under_its_limit_keeps_logging_in(alice):
    for n in range(19):
        log_in("wrong", username=f"typo{n}")
    client, response = log_in(TEST_PASSWORD)
    assert response.status_code == 302 and logged_in(client)
