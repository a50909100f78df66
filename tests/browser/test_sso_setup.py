"""Single sign-on as a newcomer meets it: no button and a plain page while it is not set up, and
the README's local recipe (the test provider, the settings, the group mapping) signing a user in
through the button, in a real browser."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from django.core.management import call_command
from playwright.sync_api import expect

from apps.sso import discovery
from apps.teams.models import Membership, User
from tests.processes import free_port, stop, wait_for

README = Path(__file__).resolve().parents[2] / "README.md"


def recipe() -> dict:
    """The commands of the README's "Trying it locally" section."""
    text = README.read_text()
    section = text.split("#### Trying it locally", 1)[1].split("\n## ", 1)[0]
    lines = [
        line
        for block in re.findall(r"```sh\n(.*?)```", section, re.S)
        for line in block.splitlines()
    ]
    provider = next(shlex.split(line) for line in lines if "-m oidc_provider_mock" in line)
    demo = next(shlex.split(line) for line in lines if line.endswith("make demo"))
    shell = next(shlex.split(line) for line in lines if "manage.py shell -c" in line)
    return {
        "provider_args": provider[provider.index("oidc_provider_mock") + 1 :],
        "env": dict(word.split("=", 1) for word in demo if "=" in word),
        "mapping": shell[shell.index("-c") + 1],
    }


def test_without_sso_there_is_no_button_and_its_address_says_it_is_not_set_up(page, browser_errors):
    browser_errors.allow(r"Failed to load resource.*404")
    page.goto("/login/")
    expect(page.get_by_label("Username")).to_be_visible()
    expect(page.get_by_role("link", name="Sign in with SSO")).to_have_count(0)

    page.goto("/sso/login/")
    expect(page.get_by_role("heading", name="Single sign-on is not set up")).to_be_visible()
    expect(page.locator("main")).not_to_contain_text("Page not found")
    page.get_by_role("link", name="Log in with your username and password").click()
    page.wait_for_url("**/login/")
    expect(page.get_by_label("Username")).to_be_visible()


@pytest.fixture
def readme_provider():
    """The test provider, started with the README's arguments (on a free port)."""
    steps = recipe()
    args = steps["provider_args"]
    port = free_port()
    args[args.index("--port") + 1] = str(port)
    process = subprocess.Popen(
        [sys.executable, "-m", "oidc_provider_mock", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return requests.get(f"{url}/.well-known/openid-configuration", timeout=1).ok
        except requests.ConnectionError:
            return False

    try:
        assert wait_for(answers, timeout=30, every=0.2), "the test provider did not start"
        yield url, steps
    finally:
        stop(process)


def test_the_readmes_recipe_signs_a_newcomer_in_with_the_sso_button(
    page, settings, readme_provider
):
    url, steps = readme_provider
    env = steps["env"]
    assert env["OIDC_ISSUER"].startswith("http://127.0.0.1:")
    settings.OIDC_ISSUER = url  # the README's issuer, on this test's port
    settings.SSO_ENABLED = True
    settings.OIDC_RP_CLIENT_ID = env["OIDC_CLIENT_ID"]
    settings.OIDC_RP_CLIENT_SECRET = env["OIDC_CLIENT_SECRET"]
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "apps.sso.backends.PortalOIDCBackend",
    ]
    discovery.clear_cache()
    call_command("shell", command=steps["mapping"])
    # The provider's page styles itself from a CDN this sandbox cannot reach; serve it nothing.
    page.route(
        "https://cdn.jsdelivr.net/**",
        lambda route: route.fulfill(status=200, content_type="text/css", body=""),
    )
    try:
        page.goto("/login/")
        page.get_by_role("link", name="Sign in with SSO").click()
        expect(page.get_by_role("heading", name="Authorize Client")).to_be_visible()
        page.get_by_role("button", name="dana", exact=True).click()
        expect(page.locator(".user-menu")).to_contain_text("dana")
    finally:
        discovery.clear_cache()
    dana = User.objects.get(username="dana")
    assert list(Membership.objects.filter(user=dana).values_list("team__slug", "role")) == [
        ("vision", "member")
    ]
