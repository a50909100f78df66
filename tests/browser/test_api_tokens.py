"""The API tokens page in a browser: create (the key shown once), use it, revoke it."""

from django.test import Client
from playwright.sync_api import expect


def _api_status(key: str) -> int:
    return Client().get("/api/v1/teams/", HTTP_AUTHORIZATION=f"Token {key}").status_code


def test_create_a_token_see_it_once_use_it_and_revoke_it(login_as):
    page = login_as("alice")
    page.get_by_role("link", name="alice").click()
    expect(page.get_by_role("heading", name="API tokens")).to_be_visible()
    page.fill("#id_name", "nightly-eval")
    page.select_option("#id_scope", label="Read only")
    page.select_option("#id_expires_in_days", label="30 days")
    page.get_by_role("button", name="Create token").click()

    key = page.get_by_test_id("api-token").inner_text()
    assert _api_status(key) == 200
    row = page.locator('[data-token-name="nightly-eval"]')
    expect(row).to_contain_text("Read only")
    expect(row.get_by_test_id("api-token-status")).to_have_text("active")

    page.reload()
    expect(page.get_by_test_id("api-token")).to_have_count(0)
    assert key not in page.content()

    questions = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.locator('[data-token-name="nightly-eval"]').get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("status")).to_contain_text("revoked: it no longer works")
    assert questions and "nightly-eval" in questions[0]
    expect(
        page.locator('[data-token-name="nightly-eval"]').get_by_test_id("api-token-status")
    ).to_contain_text("revoked")
    assert _api_status(key) == 401
