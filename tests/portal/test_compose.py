"""docker-compose.yml, the Dockerfile and .env.example point at things that really exist.

No Docker engine is needed: commands are parsed with the same CLI parsers the containers use
(celery's click commands, gunicorn's argparse, the agent's argparse) and their targets imported.
No database is needed either.
"""

import importlib
import importlib.util
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from celery.app.utils import find_app
from celery.bin.base import CLIContext
from celery.bin.celery import celery as celery_cli
from django.conf import settings
from django.core.management import get_commands
from django.urls import resolve
from gunicorn.config import Config as GunicornConfig

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENV_EXAMPLE = ROOT / ".env.example"

SERVICES = {"postgres", "redis", "web", "worker", "beat", "agent"}
PORTAL_SERVICES = ("web", "worker", "beat")
# Variables the brief and DESIGN.md name; .env.example must list at least these.
DOCUMENTED_VARS = {
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "REDIS_URL",
    "DJANGO_SECRET_KEY",
    "DJANGO_DEBUG",
    "DJANGO_ALLOWED_HOSTS",
    "DJANGO_CSRF_TRUSTED_ORIGINS",
    "TEST_DATABASE_URL",
    "NVML_BACKEND",
    "TELEMETRY_POLL_SECONDS",
    "DEMO_PASSWORD",
    "LOG_LEVEL",
}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def service(compose: dict, name: str) -> dict:
    return compose["services"][name]


def commands_of(svc: dict) -> list[list[str]]:
    """The argv of each program a service runs, in order (`sh -c "a && exec b"` gives two)."""
    command = svc["command"]
    argv = shlex.split(command) if isinstance(command, str) else [str(part) for part in command]
    if argv[:2] in (["sh", "-c"], ["/bin/sh", "-c"]):
        steps = [shlex.split(step) for step in argv[2].split("&&")]
        return [step[1:] if step[:1] == ["exec"] else step for step in steps]
    return [argv]


def environment_of(svc: dict) -> dict:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {key: (None if value is None else str(value)) for key, value in env.items()}


def depends_on(svc: dict) -> dict:
    deps = svc.get("depends_on") or {}
    return {name: {} for name in deps} if isinstance(deps, list) else deps


def parse_celery(argv: list[str]):
    """Parse `celery -A <app> <subcommand> ...` with celery's own click commands (no run)."""
    assert argv[0] == "celery"
    sub_index = next(i for i, arg in enumerate(argv) if arg in celery_cli.commands)
    group_ctx = celery_cli.make_context("celery", argv[1:sub_index])
    app = find_app(group_ctx.params["app"])
    group_ctx.obj = CLIContext(app=app, no_color=True, workdir=None)
    sub = argv[sub_index]
    sub_ctx = celery_cli.commands[sub].make_context(sub, argv[sub_index + 1 :], parent=group_ctx)
    return app, sub, sub_ctx.params


def parse_gunicorn(argv: list[str]):
    assert argv[0] == "gunicorn"
    return GunicornConfig().parser().parse_args(argv[1:])


def assert_wsgi_target_importable(target: str) -> None:
    module_name, _, attribute = target.partition(":")
    module = importlib.import_module(module_name)
    assert callable(getattr(module, attribute)), target


def test_compose_file_parses_and_has_exactly_the_portal_services(compose):
    assert set(compose["services"]) == SERVICES


def test_postgres_and_redis_have_healthchecks_and_postgres_a_volume(compose):
    postgres, redis = service(compose, "postgres"), service(compose, "redis")
    assert postgres["image"].startswith("postgres:16")
    assert redis["image"].startswith("redis:7")
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert "ping" in redis["healthcheck"]["test"]
    volume = postgres["volumes"][0].split(":")[0]
    assert volume in compose["volumes"]
    env = environment_of(postgres)
    database_url = environment_of(service(compose, "web"))["DATABASE_URL"]
    assert database_url == (
        f"postgres://{env['POSTGRES_USER']}:{env['POSTGRES_PASSWORD']}"
        f"@postgres:5432/{env['POSTGRES_DB']}"
    )


def test_portal_services_get_production_settings_and_wait_for_healthy_services(compose):
    for name in PORTAL_SERVICES:
        svc = service(compose, name)
        assert svc["build"] == "."
        env = environment_of(svc)
        assert env["DATABASE_URL"] == "postgres://portal:portal@postgres:5432/portal"
        assert env["REDIS_URL"] == "redis://redis:6379/0"
        assert env["DJANGO_DEBUG"] == "0"
        # No default secret: compose refuses to start until one is provided.
        assert env["DJANGO_SECRET_KEY"] == "${DJANGO_SECRET_KEY:?set DJANGO_SECRET_KEY}"
        assert env["DJANGO_ALLOWED_HOSTS"] == "${DJANGO_ALLOWED_HOSTS:-localhost}"
        deps = depends_on(svc)
        assert {"postgres", "redis"} <= set(deps), name
        assert all(dep.get("condition") == "service_healthy" for dep in deps.values()), name
    for name in ("worker", "beat"):  # they start once web has migrated the database
        assert depends_on(service(compose, name))["web"]["condition"] == "service_healthy"


def test_web_migrates_then_serves_portal_wsgi_with_gunicorn_and_checks_healthz(compose):
    web = service(compose, "web")
    migrate, serve = commands_of(web)

    assert migrate[:3] == ["python", "manage.py", "migrate"]
    assert (ROOT / "manage.py").is_file()
    assert "migrate" in get_commands()
    assert "--noinput" in migrate

    options = parse_gunicorn(serve)
    assert options.args == ["portal.wsgi:application"]
    assert options.bind == ["0.0.0.0:8000"]
    assert_wsgi_target_importable("portal.wsgi:application")
    assert "8000:8000" in [str(port) for port in web["ports"]]

    probe = " ".join(web["healthcheck"]["test"])
    url = re.search(r"http://localhost:8000(/\S*?)['\"]", probe).group(1)
    assert url == "/healthz"
    assert resolve(url).url_name == "healthz"


def test_web_runs_several_gunicorn_workers_unless_told_otherwise(compose):
    """gunicorn alone starts one sync worker, which makes every request wait for the one before
    it; compose passes WEB_CONCURRENCY, which gunicorn reads (when it starts) as its worker
    count."""
    value = environment_of(service(compose, "web"))["WEB_CONCURRENCY"]
    default = re.fullmatch(r"\$\{WEB_CONCURRENCY:-(\d+)\}", value).group(1)

    def workers(environment: dict) -> int:
        probe = "from gunicorn.config import Config; print(Config().workers)"
        return int(
            subprocess.run(
                [sys.executable, "-c", probe], env=environment, capture_output=True, check=True
            ).stdout
        )

    without = {key: val for key, val in os.environ.items() if key != "WEB_CONCURRENCY"}
    assert workers({**without, "WEB_CONCURRENCY": default}) == int(default) > 1
    assert workers(without) == 1


def test_worker_runs_the_portal_celery_app_on_the_portal_queue(compose):
    [argv] = commands_of(service(compose, "worker"))
    app, subcommand, params = parse_celery(argv)

    from portal.celery import app as portal_app

    assert app is portal_app
    assert subcommand == "worker"
    assert params["queues"] == [settings.CELERY_TASK_DEFAULT_QUEUE] == ["portal"]
    assert params["loglevel"] == logging.INFO


def test_beat_runs_the_portal_celery_app_with_a_writable_schedule_file(compose):
    [argv] = commands_of(service(compose, "beat"))
    app, subcommand, params = parse_celery(argv)

    from portal.celery import app as portal_app

    assert app is portal_app
    assert subcommand == "beat"
    # The image runs as a non-root user; /tmp is writable, the working directory is not.
    assert params["schedule"] == "/tmp/celerybeat-schedule"  # noqa: S108 - the point


def test_agent_runs_the_node_agent_module_with_the_real_nvml_backend(compose):
    [argv] = commands_of(service(compose, "agent"))
    assert argv[:3] == ["python", "-m", "workers.agent"]
    assert importlib.util.find_spec("workers.agent.__main__") is not None

    agent_main = importlib.import_module("workers.agent.__main__")
    assert agent_main.parse_args(argv[3:]).backend == "real"


def test_agent_holds_no_database_credentials_or_secrets(compose):
    agent = service(compose, "agent")
    env = environment_of(agent)
    assert env == {"NVML_BACKEND": "real", "CELERY_BROKER_URL": "redis://redis:6379/0"}
    assert "DATABASE_URL" not in env
    assert not [key for key in env if key.startswith("POSTGRES_")]
    assert not [key for key in env if "SECRET" in key or "PASSWORD" in key]
    assert "env_file" not in agent
    assert "postgres" not in json.dumps(agent)  # not even a dependency on the database
    assert set(depends_on(agent)) == {"redis"}


def test_agent_reserves_nvidia_gpus_only_under_the_gpu_profile(compose):
    agent = service(compose, "agent")
    assert agent["profiles"] == ["gpu"]
    [device] = agent["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert "gpu" in device["capabilities"]
    for name in SERVICES - {"agent"}:  # `docker compose up` works on machines without GPUs
        assert "profiles" not in service(compose, name), name


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    instructions, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        current += stripped[:-1] + " " if stripped.endswith("\\") else stripped
        if not stripped.endswith("\\"):
            keyword, _, arguments = current.partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
            current = ""
    return instructions


def test_dockerfile_default_command_serves_portal_wsgi_as_a_non_root_user():
    instructions = _dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    entry = [args for keyword, args in instructions if keyword in ("CMD", "ENTRYPOINT")]
    assert entry, "the Dockerfile has no CMD or ENTRYPOINT"
    assert any("portal.wsgi" in args for args in entry)

    [cmd] = [args for keyword, args in instructions if keyword == "CMD"]
    options = parse_gunicorn(json.loads(cmd))
    assert options.args == ["portal.wsgi:application"]
    assert options.bind == ["0.0.0.0:8000"]

    users = [args for keyword, args in instructions if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert ("EXPOSE", "8000") in instructions
    runs = " ".join(args for keyword, args in instructions if keyword == "RUN")
    assert "pip install ." in runs
    assert "manage.py collectstatic --noinput" in runs
    # The build-time key only satisfies the settings' check; it never becomes image config.
    assert not [
        args
        for keyword, args in instructions
        if keyword in ("ENV", "ARG") and "DJANGO_SECRET_KEY" in args
    ]


def _env_example_names() -> set[str]:
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.MULTILINE))


def _env_vars_read_by_the_code() -> set[str]:
    pattern = re.compile(
        r"""(?:\benv(?:\.\w+)?\(|os\.environ\.get\(|os\.getenv\(|os\.environ\[)"""
        r"""\s*["']([A-Z][A-Z0-9_]*)["']"""
    )
    names = set()
    for package in ("portal", "apps", "workers"):
        for path in (ROOT / package).rglob("*.py"):
            names |= set(pattern.findall(path.read_text()))
    return names


def test_env_example_lists_every_variable_the_code_and_compose_read():
    listed = _env_example_names()
    interpolated = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", COMPOSE_FILE.read_text()))
    missing = (DOCUMENTED_VARS | _env_vars_read_by_the_code() | interpolated) - listed
    assert not missing, f".env.example does not list {sorted(missing)}"


def test_env_example_holds_no_usable_secret():
    values = dict(
        re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", ENV_EXAMPLE.read_text(), re.MULTILINE)
    )
    # The settings refuse keys under 32 characters when DJANGO_DEBUG=0, so this cannot ship.
    assert len(values["DJANGO_SECRET_KEY"]) < 32


def _docker_compose_available() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        version = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return version.returncode == 0


@pytest.mark.parametrize("profile_args", [[], ["--profile", "gpu"]], ids=["default", "gpu"])
def test_docker_compose_config_validates_the_file(profile_args):
    if not _docker_compose_available():
        pytest.skip("`docker compose version` fails here (no compose CLI plugin)")
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE_FILE), *profile_args, "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DJANGO_SECRET_KEY": "x" * 50},
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
