import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings
from rest_framework.authtoken.models import Token

from apps.fleet.choices import GpuStatus
from apps.fleet.models import Gpu

ROOT = Path(__file__).resolve().parents[2]
RANDOM_KEY = secrets.token_urlsafe(50)


@pytest.mark.django_db
def test_healthz_reports_database_broker_and_cache_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "broker": "ok", "cache": "ok"},
    }


@pytest.mark.django_db
def test_healthz_is_503_and_names_the_broker_when_it_is_down(client):
    from portal.celery import app

    original = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"
    try:
        response = client.get("/healthz")
    finally:
        app.conf.broker_url = original
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"].startswith("down")


@pytest.mark.django_db
@override_settings(METRICS_TOKEN="scrape-token-for-tests")
def test_metrics_exposes_fleet_gauges_in_prometheus_format(client, fleet):
    Gpu.objects.filter(uuid="GPU-l40s-a-0").update(status=GpuStatus.DRAINED)
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-for-tests")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert 'portal_nodes{status="up"} 3.0' in text
    assert 'portal_gpus{status="drained"} 1.0' in text
    assert 'portal_gpus_schedulable{model="L40S-48GB"} 3.0' in text


@pytest.mark.django_db
def test_api_schema_and_offline_swagger_ui(client, member):
    client.force_login(member)
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert {"/api/v1/gpus/", "/api/v1/nodes/", "/api/v1/teams/"} <= set(schema["paths"])
    docs = client.get("/api/v1/docs/").content.decode()
    assert "swagger-ui" in docs
    assert not re.search(r'(src|href)="(https?:)?//', docs)  # nothing loaded from a CDN


@pytest.mark.django_db
@override_settings(METRICS_TOKEN="scrape-token-for-tests", METRICS_PUBLIC=False)
def test_metrics_needs_a_login_or_the_bearer_token(client, member):
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert b"portal_nodes" not in refused.content
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-for-tests-not")
    assert wrong.status_code == 401
    assert (
        client.get("/metrics", HTTP_AUTHORIZATION="Token scrape-token-for-tests").status_code == 401
    )
    client.force_login(member)
    assert b"portal_nodes" in client.get("/metrics").content


@pytest.mark.django_db
@override_settings(METRICS_TOKEN="", METRICS_PUBLIC=False)
def test_metrics_without_a_configured_token_refuses_every_bearer(client):
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


@pytest.mark.django_db
@override_settings(METRICS_PUBLIC=True)
def test_metrics_public_setting_opens_metrics(client):
    assert b"portal_nodes" in client.get("/metrics").content


@pytest.mark.django_db
@override_settings(API_DOCS_PUBLIC=False)
def test_api_schema_and_docs_need_a_login_or_a_token(client, member):
    for url in ("/api/v1/schema/", "/api/v1/docs/", "/api/v1/docs/?script="):
        response = client.get(url)
        assert response.status_code in (401, 403), url
        assert b"openapi" not in response.content
    token = Token.objects.create(user=member).key
    schema = client.get("/api/v1/schema/?format=json", HTTP_AUTHORIZATION=f"Token {token}")
    assert schema.status_code == 200 and "/api/v1/gpus/" in schema.json()["paths"]


@pytest.mark.django_db
@override_settings(API_DOCS_PUBLIC=True)
def test_api_docs_public_setting_opens_schema_and_docs(client):
    assert client.get("/api/v1/schema/?format=json").json()["openapi"].startswith("3.")
    assert b"swagger-ui" in client.get("/api/v1/docs/").content


def _import_settings(env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    return subprocess.run(
        [sys.executable, "-c", "import portal.settings"],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_refuses_dev_secret_key():
    result = _import_settings({"DJANGO_DEBUG": "0", "DJANGO_ALLOWED_HOSTS": "portal.example.com"})
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_production_refuses_empty_allowed_hosts():
    result = _import_settings({"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": RANDOM_KEY})
    assert result.returncode != 0
    assert "DJANGO_ALLOWED_HOSTS must be set" in result.stderr


def test_production_settings_use_secure_cookies():
    result = _import_settings(
        {"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": RANDOM_KEY, "DJANGO_ALLOWED_HOSTS": "a.example"}
    )
    assert result.returncode == 0, result.stderr
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "import portal.settings as s; print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": RANDOM_KEY,
            "DJANGO_ALLOWED_HOSTS": "a.example",
        },
    )
    assert check.stdout.split() == ["True", "True"]


@override_settings(DEBUG=False)
@pytest.mark.django_db
def test_unknown_page_renders_portal_404(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert b"404" in response.content and b"GPU Portal" in response.content
