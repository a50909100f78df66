"""Operational endpoints (health, metrics) and the site-wide error pages."""

import logging
import threading
import time

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import HttpResponse, HttpResponseServerError, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.utils.module_loading import import_string
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from portal.celery import app as celery_app
from portal.exceptions import RETRY_AFTER_SECONDS
from portal.permissions import metrics_allowed
from portal.request_limits import API_PREFIX, refusal

logger = logging.getLogger(__name__)


# /healthz answers within this, whatever hangs (a load balancer's probe typically waits 2 s);
# each check also has its own shorter timeout, so a slow dependency is named for what it did.
HEALTH_CHECK_SECONDS = 1.2
SOCKET_TIMEOUTS = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5}


def _check_database() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connection.close()  # this check runs in a thread of its own: no connection left behind


def _check_broker() -> None:
    with celery_app.connection_for_write(transport_options=SOCKET_TIMEOUTS) as conn:
        conn.ensure_connection(max_retries=1, timeout=0.5)


def _check_cache() -> None:
    # Throttles and the token check count in it (portal.rate_limits); the socket timeouts
    # are in the cache's settings.
    cache.set("healthz", "ok", timeout=10)
    if cache.get("healthz") != "ok":
        raise RuntimeError("the cache did not keep a value")


HEALTH_CHECKS = {"database": _check_database, "broker": _check_broker, "cache": _check_cache}


def run_health_checks(timeout: float = HEALTH_CHECK_SECONDS) -> dict[str, str]:
    """{check: "ok" or "down: why"}, all checks run at once, each in a thread of its own, so a
    dependency that hangs (a paused Redis, a stuck database) costs at most `timeout` and is
    named as down."""
    results = dict.fromkeys(HEALTH_CHECKS, f"down: no answer within {timeout:g} s")

    def run(name, check):
        try:
            check()
            results[name] = "ok"
        except Exception as error:  # noqa: BLE001 - any failure means "down"; we report it
            results[name] = f"down: {type(error).__name__}"

    threads = [
        threading.Thread(target=run, args=item, name=f"healthz-{item[0]}", daemon=True)
        for item in HEALTH_CHECKS.items()
    ]
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    checks = dict(results)  # a check that answers later changes nothing
    for name, state in checks.items():
        if state != "ok":
            logger.warning("healthz: %s is %s", name, state)
    return checks


@never_cache
def healthz_view(request):
    """200 when the database, the broker and the cache answer, else 503 naming what is down
    (with Retry-After, as every 503 of the portal)."""
    checks = run_health_checks()
    healthy = all(value == "ok" for value in checks.values())
    response = JsonResponse(
        {"status": "ok" if healthy else "degraded", "checks": checks},
        status=200 if healthy else 503,
    )
    if not healthy:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


@never_cache
def metrics_view(request):
    if not metrics_allowed(request):
        response = HttpResponse(
            "Log in, or send Authorization: Bearer <METRICS_TOKEN>.\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    registry = CollectorRegistry()
    for path in settings.METRICS_COLLECTORS:
        registry.register(import_string(path)())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def error_403(request, exception=None):
    message = (
        str(exception) if exception and str(exception) else "You do not have access to this page."
    )
    return render(request, "403.html", {"message": message}, status=403)


def error_404(request, exception=None):
    if request.path.startswith(API_PREFIX):
        return refusal(request, 404, "not_found", "Not found.")
    return render(request, "404.html", status=404)


def error_500(request):
    """Rendered without the request: what failed may be the session or the database itself,
    and context processors would touch them again."""
    if request.path.startswith(API_PREFIX):
        return refusal(request, 500, "server_error", "A server error occurred; it was logged.")
    try:
        page = loader.get_template("500.html").render()
    except Exception:  # noqa: BLE001 - the error page itself must not fail
        logger.exception("the 500 page could not be rendered")
        page = "Server error"
    return HttpResponseServerError(page)
