"""Browser tests: Playwright (Python) drives Debian's chromium against pytest-django's live server.

Every test here is marked ``browser``. Without a chromium binary they are skipped, unless
``REQUIRE_BROWSER=1`` (CI), where a missing browser is a failure: CI must never skip them.
"""

import os
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

# Playwright's sync API runs an asyncio loop in the main thread; Django would otherwise refuse
# ORM calls from the test thread (SynchronousOnlyOperation). Safe here: the loop only drives
# the browser, the ORM calls are ordinary blocking calls made between page actions.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

BROWSER_DIR = Path(__file__).resolve().parent
ARTIFACTS_DIR = BROWSER_DIR.parent.parent / "test-artifacts"
CHROMIUM_PATH = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
REQUIRE_BROWSER = os.environ.get("REQUIRE_BROWSER", "") == "1"
# Without the background-networking flags chromium phones home, and those connections are
# refused in the sandboxes this suite runs in.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DEFAULT_TIMEOUT_MS = 10_000


def pytest_collection_modifyitems(config, items):
    for item in items:
        if BROWSER_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item, so fixtures can tell whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not os.path.exists(CHROMIUM_PATH):
        reason = (
            f"chromium not found at {CHROMIUM_PATH} (set CHROMIUM_PATH, or install Debian's "
            "chromium: apt-get install chromium)"
        )
        if REQUIRE_BROWSER:
            pytest.fail(f"REQUIRE_BROWSER=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return CHROMIUM_PATH


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(
            executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS
        )
    except Exception:
        playwright.stop()
        raise
    yield browser
    browser.close()
    playwright.stop()


@pytest.fixture
def demo_data(transactional_db):
    """The demo's teams, users, quotas and 28-GPU fleet (see the seed_demo command), with an
    empty calendar so each test books what it needs."""
    call_command("seed_demo", "--without-reservations", stdout=open(os.devnull, "w"))  # noqa: SIM115


class BrowserErrors:
    """Console errors and uncaught page errors seen during a test.

    A test that provokes an error on purpose (a 403 or 404 page logs "Failed to load
    resource") declares it with ``allow(pattern)``; anything else fails the test at teardown.
    """

    def __init__(self):
        self.errors: list[str] = []
        self.allowed: list[re.Pattern] = []

    def on_console(self, msg):
        if msg.type == "error":
            self.errors.append(f"console.error: {msg.text} ({msg.location.get('url', '')})")

    def on_pageerror(self, error):
        self.errors.append(f"pageerror: {error}")

    def allow(self, pattern: str):
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]


@pytest.fixture
def browser_errors() -> BrowserErrors:
    return BrowserErrors()


@pytest.fixture
def page(request, browser, live_server, demo_data, browser_errors):
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = context.new_page()
    page.on("console", browser_errors.on_console)
    page.on("pageerror", browser_errors.on_pageerror)
    yield page
    failed = any(
        getattr(request.node, f"rep_{when}", None) is not None
        and getattr(request.node, f"rep_{when}").failed
        for when in ("setup", "call")
    )
    if failed:
        ARTIFACTS_DIR.mkdir(exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
        try:
            page.screenshot(path=str(ARTIFACTS_DIR / f"{name}.png"), full_page=True)
        except Exception as error:  # noqa: BLE001 - a screenshot must not mask the failure
            print(f"could not save screenshot: {error}")
    context.close()
    unexpected = browser_errors.unexpected()
    if unexpected and not failed:
        pytest.fail("Browser reported errors:\n" + "\n".join(unexpected), pytrace=False)


def login(page, username: str, password: str | None = None) -> None:
    """Log in through the real form at /login/ and wait for the redirect away from it."""
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password if password is not None else settings.DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login/" not in url)


@pytest.fixture
def login_as(page):
    """``login_as("alice")`` logs the test's page in as a demo user and returns the page."""

    def _login(username: str, password: str | None = None):
        login(page, username, password)
        return page

    return _login
