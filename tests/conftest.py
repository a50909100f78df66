"""Shared fixtures. The suite runs on real PostgreSQL and Redis and refuses to start without."""

import socket
from datetime import timedelta
from urllib.parse import urlparse

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from apps.fleet.models import GpuModel
from apps.teams.choices import TeamRole
from apps.teams.models import Quota
from tests.factories import (
    FinanceUserFactory,
    MembershipFactory,
    PlatformAdminFactory,
    TeamFactory,
    UserFactory,
    make_node_with_gpus,
)

START_HINTS = {
    "PostgreSQL": "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
    "Redis": (
        'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" '
        "--appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log"
    ),
}


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def pytest_sessionstart(session):
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.exit(f"The test suite needs PostgreSQL; TEST_DATABASE_URL gives {db['ENGINE']}.", 2)
    redis = urlparse(settings.CELERY_BROKER_URL)
    servers = {
        "PostgreSQL": (db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432)),
        "Redis": (redis.hostname or "127.0.0.1", redis.port or 6379),
    }
    down = [name for name, (host, port) in servers.items() if not _reachable(host, port)]
    if down:
        lines = [
            f"{name} is not reachable at {servers[name][0]}:{servers[name][1]}." for name in down
        ]
        lines += [f"Start it with: {START_HINTS[name]}" for name in down]
        lines.append("Or point TEST_DATABASE_URL / REDIS_URL at running servers.")
        pytest.exit("\n".join(lines), returncode=3)


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def team():
    return TeamFactory(slug="vision")


@pytest.fixture
def other_team():
    return TeamFactory(slug="nlp")


@pytest.fixture
def member(team):
    return MembershipFactory(team=team, user=UserFactory(username="alice")).user


@pytest.fixture
def team_admin(team):
    return MembershipFactory(
        team=team, user=UserFactory(username="tara"), role=TeamRole.TEAM_ADMIN
    ).user


@pytest.fixture
def outsider(other_team):
    return MembershipFactory(team=other_team, user=UserFactory(username="olga")).user


@pytest.fixture
def finance_user():
    return FinanceUserFactory(username="fran")


@pytest.fixture
def platform_admin():
    return PlatformAdminFactory(username="root-admin")


@pytest.fixture
def fleet():
    """Two H100 nodes of 8 GPUs and one L40S node of 4."""
    return [
        make_node_with_gpus("h100-a", 8),
        make_node_with_gpus("h100-b", 8),
        make_node_with_gpus("l40s-a", 4, model_name="L40S-48GB"),
    ]


@pytest.fixture
def tomorrow_9():
    now = timezone.now()
    return (now + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)


@pytest.fixture
def h100(fleet):
    return GpuModel.objects.get(name="H100-SXM-80GB")


@pytest.fixture
def quotas(team, other_team, h100):
    """vision: 4 guaranteed / 12 limit of H100; nlp: 8 / 16."""
    return [
        Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=12),
        Quota.objects.create(team=other_team, gpu_model=h100, guaranteed=8, limit=16),
    ]


@pytest.fixture
def drain_listening(db):
    """The telemetry drain has run without a break for an hour and is caught up: node health
    may judge (set `now` older to judge in the past)."""
    from apps.telemetry.models import DrainHeartbeat

    def listening(now=None):
        now = now or timezone.now()
        DrainHeartbeat.objects.update_or_create(
            pk=1,
            defaults={
                "listening_since": now - timedelta(hours=1),
                "last_run_at": now,
                "backlog": False,
            },
        )

    listening()
    return listening
