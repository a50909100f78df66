"""Production is the default and is locked down; development (demo, tests) opts in.

Settings are read once per process, so each production variant is imported in a subprocess
with a clean environment (no DJANGO_* variables inherited from the test run)."""

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from portal.secret_key import secret_key_problem

ROOT = Path(__file__).resolve().parents[2]
RANDOM_KEY = secrets.token_urlsafe(50)
DEV_KEY = "dev-only-insecure-secret-key-change-me"
PRODUCTION = {
    "DJANGO_SECRET_KEY": RANDOM_KEY,
    "DJANGO_ALLOWED_HOSTS": "portal.example.com,testserver",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "METRICS_TOKEN": secrets.token_urlsafe(30),
}
# `check --deploy` may report only these, each a deployment's own choice (README, Configuration):
# HSTS for subdomains and preloading need every subdomain on HTTPS.
DOCUMENTED_DEPLOY_WARNINGS = {"security.W005", "security.W021"}


def run_python(code: str, env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "METRICS_", "API_DOCS_")) and k != "REDIS_URL"
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "DATABASE_URL": f"sqlite:///{tmp_path / 'portal.sqlite3'}", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def settings_of(env: dict, tmp_path: Path, *names: str) -> dict:
    code = (
        "import json, portal.settings as s; "
        f"print(json.dumps({{n: getattr(s, n, None) for n in {list(names)!r}}}, default=str))"
    )
    result = run_python(code, env, tmp_path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_unset_django_debug_means_production(tmp_path):
    assert settings_of(PRODUCTION, tmp_path, "DEBUG") == {"DEBUG": False}
    refused = run_python("import portal.settings", {}, tmp_path)
    assert refused.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in refused.stderr
    assert "it is the development key" in refused.stderr


def test_development_is_opted_into(tmp_path):
    assert settings_of({"DJANGO_DEBUG": "1"}, tmp_path, "DEBUG") == {"DEBUG": True}


# The Dockerfile's build-time key before it drew a random one: copied into real deployments.
OLD_DOCKERFILE_KEY = "build-only-collectstatic-placeholder-not-a-secret"
PLACEHOLDER = "development key or a placeholder"


@pytest.mark.parametrize(
    "key, reason",
    [
        ("x" * 32, "only 1 distinct characters"),
        ("x" * 200, "only 1 distinct characters"),
        ("abcdefghi" * 6, "only 9 distinct characters"),
        ("Tr0ub4dor&3", "it has 11 characters"),
        (DEV_KEY, PLACEHOLDER),
        ("django-insecure-" + RANDOM_KEY, PLACEHOLDER),
        (OLD_DOCKERFILE_KEY, PLACEHOLDER),
        ("change-me", PLACEHOLDER),
        # A sequence twice, a word repeated then digits in order, a keyboard walk: 10+ distinct
        # characters and 32+ long, yet guessed at once.
        ("0123456789abcdef0123456789abcdef", "it is guessable"),
        ("passwordpasswordpassword1234567890", "it is guessable"),
        ("qwertyuiopasdfghjklzxcvbnm1234567890", "it is guessable"),
        ("abcdefghijklmnopqrstuvwxyz0123456789", "it is guessable"),
        ("Xk9#mQ2&vL" * 4, "it is guessable"),
        # Typed phrases: long and varied, but words.
        ("ThisIsMyVerySecretKeyForTheGpuPortal2026!", "made of words"),
        ("correct-horse-battery-staple-correct-horse", "made of words"),
    ],
)
def test_weak_secret_keys_are_refused(key, reason):
    assert reason in secret_key_problem(key, dev_key=DEV_KEY)


def test_generated_secret_keys_are_accepted():
    from django.core.management.utils import get_random_secret_key

    for _ in range(20):
        assert secret_key_problem(secrets.token_urlsafe(50), dev_key=DEV_KEY) == ""
        assert secret_key_problem(secrets.token_urlsafe(32), dev_key=DEV_KEY) == ""
        assert secret_key_problem(secrets.token_hex(16), dev_key=DEV_KEY) == ""
        assert secret_key_problem(get_random_secret_key(), dev_key=DEV_KEY) == ""
    # Past the estimator's 72 characters every part counts: random text, then a long pattern.
    assert secret_key_problem(secrets.token_urlsafe(100), dev_key=DEV_KEY) == ""
    assert "guessable" in secret_key_problem("0123456789" * 20, dev_key=DEV_KEY)


def test_production_refuses_a_key_of_identical_characters(tmp_path):
    result = run_python(
        "import portal.settings", {**PRODUCTION, "DJANGO_SECRET_KEY": "x" * 32}, tmp_path
    )
    assert result.returncode != 0
    assert "distinct characters" in result.stderr


@pytest.mark.parametrize(
    "key", ["0123456789abcdef0123456789abcdef", "passwordpasswordpassword1234567890"]
)
def test_production_refuses_a_guessable_key_and_says_how_to_make_one(key, tmp_path):
    result = run_python(
        "import portal.settings", {**PRODUCTION, "DJANGO_SECRET_KEY": key}, tmp_path
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and "it is guessable" in result.stderr
    assert "secrets.token_urlsafe(50)" in result.stderr


def test_production_starts_with_a_generated_key(tmp_path):
    key = secrets.token_urlsafe(50)
    values = settings_of({**PRODUCTION, "DJANGO_SECRET_KEY": key}, tmp_path, "SECRET_KEY")
    assert values == {"SECRET_KEY": key}


def test_no_file_of_the_project_ships_a_key_the_settings_would_take():
    """The Dockerfile draws its build-time key; .env.example and compose hold none."""
    for name in ("Dockerfile", ".env.example", "docker-compose.yml", "README.md"):
        text = (ROOT / name).read_text()
        for value in re.findall(r"DJANGO_SECRET_KEY[=:]\s*([^\s\\]+)", text):
            value = value.strip("\"'")
            if value.startswith(("${", "$(")):
                continue  # drawn or interpolated where it is used
            assert secret_key_problem(value, dev_key=DEV_KEY), (name, value)
    assert OLD_DOCKERFILE_KEY not in (ROOT / "Dockerfile").read_text()


def test_production_sends_hsts_redirects_to_https_and_trusts_the_proxy_header(tmp_path):
    values = settings_of(
        PRODUCTION,
        tmp_path,
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_PROXY_SSL_HEADER",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "CACHES",
    )
    assert values["SECURE_SSL_REDIRECT"] is True
    assert values["SECURE_HSTS_SECONDS"] >= 365 * 24 * 3600
    assert values["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert values["SESSION_COOKIE_SECURE"] and values["CSRF_COOKIE_SECURE"]
    assert values["CACHES"]["default"]["BACKEND"].endswith("RedisCache")


def test_the_redirect_and_the_proxy_header_can_be_turned_off(tmp_path):
    values = settings_of(
        {**PRODUCTION, "DJANGO_SECURE_SSL_REDIRECT": "0", "DJANGO_SECURE_PROXY_SSL_HEADER": ""},
        tmp_path,
        "SECURE_SSL_REDIRECT",
        "SECURE_PROXY_SSL_HEADER",
    )
    assert values == {"SECURE_SSL_REDIRECT": False, "SECURE_PROXY_SSL_HEADER": None}


def test_the_demo_without_redis_keeps_a_local_cache(tmp_path):
    values = settings_of({"DJANGO_DEBUG": "1"}, tmp_path, "CACHES")
    assert values["CACHES"]["default"]["BACKEND"].endswith("LocMemCache")


REQUESTS = """
import django, json
django.setup()
from django.test import Client
c = Client()
out = {}
r = c.get("/api/v1/teams/")
out["http"] = [r.status_code, r.get("Location")]
r = c.get("/healthz")
out["healthz"] = r.status_code
r = c.get("/api/v1/teams/", HTTP_X_FORWARDED_PROTO="https")
out["https"] = [r.status_code, r.get("Strict-Transport-Security"), r.get("Content-Security-Policy")]
print(json.dumps(out))
"""


def test_production_redirects_http_but_not_the_probes_and_sends_hsts_and_csp(tmp_path):
    result = run_python(
        REQUESTS, {**PRODUCTION, "DJANGO_SETTINGS_MODULE": "portal.settings"}, tmp_path
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["http"] == [301, "https://testserver/api/v1/teams/"]
    assert out["healthz"] != 301  # orchestrator probes stay on plain HTTP
    status, hsts, csp = out["https"]
    assert status == 401  # served over HTTPS: anonymous, so refused by the API itself
    assert hsts == "max-age=31536000"
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp


def _check_deploy(env: dict, tmp_path: Path) -> tuple[set[str], str]:
    code = (
        "import sys; from django.core.management import execute_from_command_line; "
        "execute_from_command_line(['manage.py', 'check', '--deploy'])"
    )
    result = run_python(code, {**env, "DJANGO_SETTINGS_MODULE": "portal.settings"}, tmp_path)
    output = result.stdout + result.stderr
    return set(re.findall(r"\(([a-z_]+\.[EW]\d+)\)", output)), output


@pytest.mark.slow
def test_check_deploy_is_clean_apart_from_the_documented_exceptions(tmp_path):
    found, output = _check_deploy(PRODUCTION, tmp_path)
    assert found <= DOCUMENTED_DEPLOY_WARNINGS, output
    found, output = _check_deploy(
        {**PRODUCTION, "DJANGO_HSTS_INCLUDE_SUBDOMAINS": "1", "DJANGO_HSTS_PRELOAD": "1"}, tmp_path
    )
    assert found == set(), output
    assert "no issues" in output


@pytest.mark.slow
def test_check_deploy_warns_without_a_shared_cache_or_a_metrics_token(tmp_path):
    env = {k: v for k, v in PRODUCTION.items() if k not in ("REDIS_URL", "METRICS_TOKEN")}
    found, output = _check_deploy(env, tmp_path)
    assert {"portal.W001", "portal.W002"} <= found, output


def test_the_demo_opts_into_development():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: export DJANGO_DEBUG := 1$", makefile, re.MULTILINE)
    procfile = dict(
        line.split(": ", 1) for line in (ROOT / "Procfile.demo").read_text().splitlines() if line
    )
    for name in ("web", "worker", "beat"):
        assert procfile[name].startswith("DJANGO_DEBUG=${DJANGO_DEBUG:-1} "), name


def test_development_keeps_one_secret_key_of_its_own_across_restarts(tmp_path):
    """The demo signs with a key made once under var/, not a published one, and a restart
    reads the same key back, so sessions survive it."""
    from portal.secret_key import development_secret_key

    first = development_secret_key(tmp_path)
    assert development_secret_key(tmp_path) == first
    assert secret_key_problem(first, dev_key=DEV_KEY) == ""
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    started = [settings_of({"DJANGO_DEBUG": "1"}, tmp_path, "SECRET_KEY") for _ in range(2)]
    assert started[0] == started[1] and started[0]["SECRET_KEY"] != DEV_KEY


def test_only_offline_commands_run_without_production_secrets(tmp_path):
    def manage(*args):
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("DJANGO_", "TEST_DATABASE")) and k != "REDIS_URL"
            }
            | {"DATABASE_URL": f"sqlite:///{tmp_path / 'portal.sqlite3'}"},
            capture_output=True,
            text=True,
            timeout=120,
        )

    offline = manage("replay_trace", "--help")
    assert offline.returncode == 0, offline.stderr
    for serving in (["check"], ["migrate", "--plan"]):
        refused = manage(*serving)
        assert refused.returncode != 0, serving
        assert "DJANGO_SECRET_KEY must be set" in refused.stderr, serving
    web = run_python("import portal.wsgi", {}, tmp_path)
    assert "DJANGO_SECRET_KEY must be set" in web.stderr
