"""Password guessing in the browser: after LOGIN_FAILURE_LIMIT wrong passwords the login page
says the user is locked out, and the right password does not get in until the cool-off."""

from urllib.parse import urlparse

from django.conf import settings
from playwright.sync_api import expect

from apps.audit.models import AuditEvent
from apps.audit.receivers import LOGIN_LOCKED_OUT
from tests.browser.conftest import login

FAILED_LOAD = "Failed to load resource: the server responded with a status of 429"


def submit(page, username: str, password: str) -> None:
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def test_wrong_passwords_lock_the_login_with_a_clear_message(page, browser_errors):
    browser_errors.allow(FAILED_LOAD)
    page.goto("/login/")
    for attempt in range(settings.AXES_FAILURE_LIMIT - 1):
        submit(page, "alice", f"guess-{attempt}")
        expect(page.get_by_role("alert")).to_contain_text("correct username and password")
    submit(page, "alice", "last-guess")
    expect(page.get_by_test_id("login-locked")).to_contain_text("Too many failed log-ins")

    submit(page, "alice", settings.DEMO_PASSWORD)
    locked = page.get_by_test_id("login-locked")
    expect(locked).to_contain_text("even with the right password")
    expect(locked).to_contain_text("15 minutes")
    assert urlparse(page.url).path == "/login/"
    expect(page.get_by_test_id("nav")).to_have_count(0)
    # The form stays usable, with the username kept.
    expect(page.locator("#id_username")).to_have_value("alice")
    assert (
        AuditEvent.objects.filter(action=LOGIN_LOCKED_OUT, object_repr__contains="alice").count()
        == 1
    )

    # Another user from the same browser is not locked out.
    login(page, "bob")
    expect(page.get_by_test_id("nav")).to_be_visible()
