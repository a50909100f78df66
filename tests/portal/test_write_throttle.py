"""API writes are limited per user across every web process (API_WRITE_THROTTLE), because the
throttle counts in the shared cache (Redis in production) with an atomic increment."""

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
import requests
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.test import override_settings
from rest_framework.authtoken.models import Token

from tests.factories import UserFactory
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 5


def _rates(writes: str) -> dict:
    return {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"writes": writes}}


@pytest.mark.django_db
def test_writes_over_the_limit_are_429_in_the_envelope_and_reads_are_not_counted(api_client):
    cache.clear()
    user = UserFactory(username="writer")
    api_client.force_authenticate(user)
    with override_settings(REST_FRAMEWORK=_rates(f"{LIMIT}/min")):
        for _ in range(LIMIT + 3):
            assert api_client.get("/api/v1/reservations/").status_code == 200
        statuses = [
            api_client.post("/api/v1/reservations/", {}, format="json").status_code
            for _ in range(LIMIT + 1)
        ]
        refused = api_client.post("/api/v1/reservations/", {}, format="json")
    assert statuses == [400] * LIMIT + [429]
    assert refused.status_code == 429
    assert refused.json()["code"] == "throttled"
    assert 0 < int(refused["Retry-After"]) <= 60
    cache.clear()


def _wait_until_serving(url: str, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "gunicorn exited early"
        try:
            requests.get(url, timeout=30)
            return
        except requests.ConnectionError:
            time.sleep(0.2)
    raise AssertionError("gunicorn did not start")


@pytest.mark.slow
def test_the_write_limit_holds_across_two_gunicorn_workers(transactional_db, tmp_path):
    """Two real worker processes on the production cache (Redis) share one limit: of 4 x LIMIT
    concurrent writes by one user, exactly LIMIT pass. With a per-process cache each worker
    would let LIMIT through."""
    user = UserFactory(username="writer-two-workers")
    token = Token.objects.create(user=user).key
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    store = redis.Redis.from_url(redis_url)
    for key in store.scan_iter(f"*throttle:writes:user:{user.pk}:*"):
        store.delete(key)

    db = connection.settings_dict
    database_url = (
        f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )
    port = free_port()
    access_log = tmp_path / "access.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        # A day: the counting window cannot roll over during the test.
        "API_WRITE_THROTTLE": f"{LIMIT}/day",
    }
    gunicorn = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "portal.wsgi:application",
            "--workers", "2", "--bind", f"127.0.0.1:{port}",
            "--access-logfile", str(access_log), "--access-logformat", "%(p)s %(s)s",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(f"{base}/login/", gunicorn)

        def write(_):
            response = requests.post(
                f"{base}/api/v1/reservations/",
                json={},
                headers={"Authorization": f"Token {token}", "Connection": "close"},
                timeout=30,
            )
            return response.status_code, response.json()

        with ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(write, range(4 * LIMIT)))
    finally:
        gunicorn.terminate()
        _, stderr = gunicorn.communicate(timeout=30)
    for key in store.scan_iter(f"*throttle:writes:user:{user.pk}:*"):
        store.delete(key)

    statuses = [status for status, _ in results]
    assert statuses.count(400) == LIMIT, statuses  # passed the throttle, refused as empty
    assert statuses.count(429) == 3 * LIMIT, statuses
    assert all(body["code"] == "throttled" for status, body in results if status == 429)
    writers = {
        line.split()[0]
        for line in access_log.read_text().splitlines()
        if line.split()[1] in ("400", "429")
    }
    assert len(writers) == 2, f"the writes did not reach both workers: {writers}\n{stderr}"


def test_a_hit_counts_in_a_window_counter_that_expires_after_the_window():
    """On Redis (the production cache) the counter is created with its expiry and incremented
    in one round trip: each hit counts once, and the counter goes away after its window (plus
    the grace)."""
    from django.core.cache import caches

    from portal.rate_limits import Rate, hit, window

    redis_cache = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        }
    }
    with override_settings(CACHES=redis_cache):
        rate = Rate.parse("3/min")
        key = f"test:window-counter:{time.time()}"
        assert [hit(key, rate)[0] for _ in range(4)] == [True, True, True, False]
        counter, _ = window(key, rate)
        backend = caches["default"]
        assert backend.get(counter) == 4
        raw_key = backend.make_and_validate_key(counter)
        ttl = backend._cache.get_client(raw_key).ttl(raw_key)
        assert 0 < ttl <= rate.seconds + 5
        backend.delete(counter)
