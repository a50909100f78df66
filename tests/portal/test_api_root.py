"""Each app wires its own API routes; the API root leads to the documentation."""

import importlib
from pathlib import Path

import pytest
from django.urls import reverse

from portal.urls import API_APPS

APPS_DIR = Path(__file__).resolve().parents[2] / "apps"


def test_every_app_with_api_routes_is_mounted():
    with_routes = {p.parent.name for p in APPS_DIR.glob("*/api_urls.py")}
    assert with_routes == set(API_APPS)
    for app in API_APPS:
        assert importlib.import_module(f"apps.{app}.api_urls").urlpatterns


@pytest.mark.django_db
def test_the_api_root_leads_to_its_documentation(client):
    response = client.get("/api/v1/")
    assert response.status_code == 302
    assert response["Location"] == reverse("swagger-ui")


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("team-list", "/api/v1/teams/"),
        ("quota-list", "/api/v1/quotas/"),
        ("node-list", "/api/v1/nodes/"),
        ("maintenance-window-list", "/api/v1/maintenance-windows/"),
        ("reservation-list", "/api/v1/reservations/"),
        ("availability", "/api/v1/availability/"),
        ("idle", "/api/v1/idle/"),
    ],
)
def test_routes_keep_their_names_and_paths(name, path):
    assert reverse(name) == path
