import pytest

from apps.fleet.choices import GpuHealth
from apps.fleet.models import Gpu
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def _uuids(response):
    return {g["uuid"] for g in response.json()["results"]}


def test_gpu_list_filters_by_model_node_status_and_health(member, fleet):
    Gpu.objects.filter(uuid="GPU-h100-a-3").update(health=GpuHealth.LOST)
    api = client_for(member)
    assert _uuids(api.get("/api/v1/gpus/?model=L40S-48GB")) == {f"GPU-l40s-a-{i}" for i in range(4)}
    assert _uuids(api.get("/api/v1/gpus/?node=h100-b&page_size=100")) == {
        f"GPU-h100-b-{i}" for i in range(8)
    }
    assert _uuids(api.get("/api/v1/gpus/?health=lost")) == {"GPU-h100-a-3"}
    assert api.get("/api/v1/gpus/?status=drained").json()["count"] == 0


def test_gpu_list_paginates(member, fleet):
    api = client_for(member)
    first = api.get("/api/v1/gpus/?page_size=5").json()
    assert first["count"] == 20 and len(first["results"]) == 5 and first["next"]
    second = api.get(first["next"]).json()
    assert not {g["uuid"] for g in first["results"]} & {g["uuid"] for g in second["results"]}


def test_invalid_filter_value_is_400_with_field(member, fleet):
    response = client_for(member).get("/api/v1/gpus/?status=melting")
    assert response.status_code == 400
    assert "status" in response.json()["detail"]


def test_node_list_counts_gpus(member, fleet):
    nodes = {n["hostname"]: n for n in client_for(member).get("/api/v1/nodes/").json()["results"]}
    assert {h: n["gpu_count"] for h, n in nodes.items()} == {"h100-a": 8, "h100-b": 8, "l40s-a": 4}


def test_token_auth_works_for_scripts(api_client, member, fleet):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=member)
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert api_client.get("/api/v1/nodes/").json()["count"] == 3
    api_client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert api_client.get("/api/v1/nodes/").status_code == 401


def test_session_auth_enforces_csrf_on_writes(platform_admin, fleet):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(platform_admin)
    response = browser.post(
        f"/api/v1/nodes/{fleet[0].pk}/drain/", {}, content_type="application/json"
    )
    assert response.status_code == 403
    assert "CSRF" in response.json()["message"]
