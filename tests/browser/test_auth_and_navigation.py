"""Logging in, role-dependent navigation, team visibility, error pages and the API docs."""

import re
from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login

# What the browser logs when the document itself answers 403/404.
FAILED_LOAD = r"Failed to load resource: the server responded with a status of {status}"


def test_anonymous_visit_redirects_to_login(page, live_server):
    page.goto("/")
    assert urlparse(page.url).path == "/login/"
    assert "next=/" in page.url or "next=%2F" in page.url
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    expect(page.get_by_test_id("nav")).to_have_count(0)


def test_wrong_password_shows_error_and_stays_on_login(page):
    page.goto("/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "not-the-password")
    page.get_by_role("button", name="Log in").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("correct username and password")
    assert urlparse(page.url).path == "/login/"
    # The username is kept, the password is not.
    expect(page.locator("#id_username")).to_have_value("alice")
    expect(page.locator("#id_password")).to_have_value("")
    expect(page.get_by_test_id("nav")).to_have_count(0)


def test_login_redirects_back_to_next(page):
    page.goto("/fleet/")
    assert urlparse(page.url).path == "/login/"
    page.fill("#id_username", "alice")
    page.fill("#id_password", "demo")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/fleet/")
    expect(page.get_by_role("heading", name="Fleet", exact=True)).to_be_visible()


@pytest.mark.parametrize(
    ("username", "sees_admin_links", "badge"),
    [("alice", False, None), ("fran", False, "finance"), ("admin", True, "platform admin")],
)
def test_nav_shows_audit_and_admin_only_to_platform_admin(page, username, sees_admin_links, badge):
    login(page, username)
    assert urlparse(page.url).path == "/"
    nav = page.get_by_test_id("nav")
    for link in ("Home", "Teams", "Fleet", "API"):
        expect(nav.get_by_role("link", name=link, exact=True)).to_be_visible()
    expected = 1 if sees_admin_links else 0
    expect(nav.get_by_role("link", name="Audit", exact=True)).to_have_count(expected)
    expect(nav.get_by_role("link", name="Admin", exact=True)).to_have_count(expected)
    menu = page.locator(".user-menu")
    expect(menu.get_by_role("link", name=username, exact=True)).to_be_visible()
    if badge:
        expect(menu.locator(".badge")).to_have_text(badge)
    else:
        expect(menu.locator(".badge")).to_have_count(0)


def test_logout_returns_to_login(page):
    login(page, "alice")
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/login/")
    page.goto("/")
    assert urlparse(page.url).path == "/login/"


def test_member_home_shows_own_team_only(page):
    login(page, "alice")
    teams_card = page.locator("section.card", has=page.get_by_role("heading", name="Your teams"))
    expect(teams_card.get_by_role("link")).to_have_count(1)
    vision = teams_card.get_by_role("link", name="Computer Vision")
    expect(vision).to_have_attribute("href", "/teams/vision/")
    expect(teams_card).to_contain_text("(Member)")
    expect(teams_card.locator('a[href="/teams/nlp/"]')).to_have_count(0)
    expect(page.locator("main")).not_to_contain_text("Natural Language Processing")
    # The fleet card counts the seeded 28 GPUs, all schedulable.
    expect(page.get_by_test_id("schedulable-gpus")).to_have_text("28")


def _team_slugs(page) -> list[str]:
    page.goto("/teams/")
    expect(page.get_by_role("heading", name="Teams", exact=True)).to_be_visible()
    return page.locator("table tbody tr td:first-child a").all_inner_texts()


def test_finance_sees_all_teams(page):
    login(page, "fran")
    assert sorted(_team_slugs(page)) == ["nlp", "robotics", "speech", "vision"]


def test_member_sees_only_own_team_in_team_list(page):
    login(page, "alice")
    assert _team_slugs(page) == ["vision"]


def test_member_gets_403_page_for_audit_log(page, browser_errors):
    browser_errors.allow(FAILED_LOAD.format(status=403))
    login(page, "alice")
    response = page.goto("/audit/")
    assert response.status == 403
    expect(page.get_by_role("heading", level=1)).to_have_text("403 · Not allowed")
    expect(page.locator("main")).to_contain_text("Only platform admins can read the audit log.")
    expect(page.get_by_test_id("audit-table")).to_have_count(0)
    # The error page keeps the site chrome, so the user can navigate away.
    expect(page.get_by_test_id("nav")).to_be_visible()


def test_member_gets_404_page_for_other_team(page, browser_errors):
    browser_errors.allow(FAILED_LOAD.format(status=404))
    login(page, "alice")
    response = page.goto("/teams/nlp/")
    assert response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("404 · Not found")
    expect(page.locator("main")).not_to_contain_text("Natural Language Processing")
    expect(page.get_by_role("link", name="Back to the home page")).to_be_visible()


def test_swagger_ui_renders_offline(page, live_server):
    local_host = urlparse(live_server.url).hostname
    requested_hosts: list[str] = []
    page.on("request", lambda request: requested_hosts.append(urlparse(request.url).hostname))
    login(page, "alice")
    requested_hosts.clear()

    page.goto("/api/v1/docs/")
    # Swagger UI fetched the schema and rendered the operations from it.
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("GPU Portal API")
    gpus_path = page.locator(".opblock-summary-path", has_text=re.compile(r"^/api/v1/gpus/$"))
    expect(gpus_path.first).to_be_visible()
    expect(page.locator(".opblock-tag", has_text="teams").first).to_be_visible()

    assert requested_hosts, "the docs page made no requests at all"
    foreign = sorted({host for host in requested_hosts if host not in {local_host, "localhost"}})
    assert not foreign, f"Swagger UI loaded assets from other hosts (CDN?): {foreign}"

    # The docs page leads back to the portal.
    page.get_by_test_id("back-to-portal").click()
    page.wait_for_url(f"{live_server.url}/")
    expect(page.get_by_test_id("nav")).to_be_visible()
