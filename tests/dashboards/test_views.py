import json
import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

PAGES = ["utilization", "idle", "occupancy"]


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def embedded_figures(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="dashboard-figures" type="application/json">')
    start = html.index(">", start) + 1
    return json.loads(html[start : html.index("</script>", start)])


@pytest.mark.parametrize("page", PAGES + ["fleet"])
def test_pages_need_login(client, page):
    response = client.get(f"/dashboards/{page}/")
    assert response.status_code == 302
    assert "/login" in response["Location"] or "login" in response["Location"]


@pytest.mark.parametrize("page", PAGES)
def test_pages_render_figures_for_each_role(member, finance_user, platform_admin, history, page):
    for user in (member, finance_user, platform_admin):
        response = logged_in(user).get(f"/dashboards/{page}/?range=7d")
        assert response.status_code == 200
        html = response.content.decode()
        assert "vendor/plotly/plotly.min.js" in html
        # No script from another host (a CDN): every <script src> is a local /static/ path.
        assert not re.search(r'<script[^>]+src="(https?:)?//', html)
        figures = embedded_figures(response)
        for name in figures:
            assert f'data-figure="{name}"' in html or page == "idle"
        assert all("data" in f and "layout" in f for f in figures.values())


def test_filter_controls_are_labelled(member, history):
    html = logged_in(member).get("/dashboards/utilization/").content.decode()
    for control in ("f-range", "f-start", "f-end", "f-team", "f-model"):
        assert f'<label for="{control}">' in html
    # A member may pick only their own teams.
    assert 'value="vision"' in html and 'value="nlp"' not in html


def test_empty_state_without_telemetry(member, fleet):
    html = logged_in(member).get("/dashboards/utilization/").content.decode()
    assert "No telemetry yet for this window." in html
    html = logged_in(member).get("/dashboards/occupancy/").content.decode()
    assert "No bookings or jobs in this window." in html


def test_bad_filter_falls_back_with_message(member, history):
    response = logged_in(member).get("/dashboards/utilization/?range=fortnight")
    assert response.status_code == 200
    assert "range must be one of" in response.content.decode()
    assert response.context["filters"].range == "24h"


def test_team_outside_members_teams_is_404(member, other_team):
    assert logged_in(member).get("/dashboards/idle/?team=nlp").status_code == 404


def test_fleet_page_is_for_platform_admins(member, finance_user, platform_admin, history):
    assert logged_in(member).get("/dashboards/fleet/").status_code == 403
    assert logged_in(finance_user).get("/dashboards/fleet/").status_code == 403
    response = logged_in(platform_admin).get("/dashboards/fleet/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "No telemetry yet for h100-a, h100-b, l40s-a." in html
    assert set(embedded_figures(response)) == {"node-status", "gpu-health", "thermal"}


def test_idle_page_links_every_gpu(platform_admin, history):
    html = logged_in(platform_admin).get("/dashboards/idle/").content.decode()
    assert html.count('href="/dashboards/gpus/') == 20
    assert "unpriced" in html


def test_nav_links_to_dashboards_and_cost(member, history):
    html = logged_in(member).get("/dashboards/utilization/").content.decode()
    assert 'href="/dashboards/utilization/"' in html
    assert 'href="/billing/cost/"' in html
    assert 'href="/dashboards/fleet/"' not in html


def test_idle_cost_table_names_the_currency(platform_admin, h100, history):
    from datetime import timedelta
    from decimal import Decimal

    from apps.billing.models import RateCard

    RateCard.objects.create(
        gpu_model=h100,
        price_per_gpu_hour=Decimal("600"),
        effective_from=history["now"] - timedelta(days=10),
    )
    client = Client()
    client.force_login(platform_admin)
    html = client.get("/dashboards/idle/").content.decode()
    # nlp's held-idle H100: 2 GPU-hours x 600.00 = 1,200.00, with separators and currency.
    assert "<td>1,200.00 USD</td>" in html


def test_utilization_chart_axes_have_units(platform_admin, history):
    from tests.conftest import client_for

    body = client_for(platform_admin).get("/api/v1/dashboards/utilization/").json()
    layout = body["figures"]["allocated-busy"]["layout"]
    assert layout["yaxis"]["title"]["text"] == "GPUs (average over each step)"
    assert layout["xaxis"]["title"]["text"] == "Time (UTC)"


def test_fleet_temperature_and_power_get_separate_panels(platform_admin, history):
    thermal = embedded_figures(logged_in(platform_admin).get("/dashboards/fleet/"))["thermal"]
    layout = thermal["layout"]
    temperature, power = layout["yaxis"]["domain"], layout["yaxis2"]["domain"]
    # No overlaid second axis: a GPU's two markers can never land on each other.
    assert "overlaying" not in layout["yaxis2"]
    assert power[1] < temperature[0]
    assert {t.get("yaxis", "y") for t in thermal["data"]} == {"y", "y2"}
