"""/api/v1/efficiency/advice/, the /efficiency/ page and its CSVs: permissions, filters, bad
input, pagination, content."""

import csv
import io

import pytest

from tests.conftest import client_for
from tests.factories import FinanceUserFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/efficiency/advice/"


def test_api_answers_the_hand_computed_advice_for_a_team_admin(scenario, team_admin):
    body = client_for(team_admin).get(URL).json()
    # See test_advice.py: 15.00 + 5.00 + 2.00 + 1.79.
    assert body["saving"] == "23.79" and body["count"] == 4
    assert body["teams"] == [
        {
            "team": "vision",
            "items": 4,
            "gpu_hours": 14.0,  # A 8 + B 1 + C 2 + F 3 (D has no finding)
            "busy_gpu_hours": 4.0,  # A 2 + B 1 + C 0 + F 1
            "idle_gpu_hours": 8.0,  # A 6 + C 2
            "saving": "23.79",
        }
    ]
    first = body["results"][0]
    assert first["id"] == scenario.a.pk and first["findings"][0]["saving"] == "15.00"
    assert first["efficiency"]["idle_gpus"] == 3


def test_api_member_sees_only_their_own(scenario, member):
    body = client_for(member).get(URL).json()
    assert {r["id"] for r in body["results"]} == {scenario.a.pk, scenario.b.pk}
    assert body["saving"] == "16.79"


def test_api_other_teams_are_404_and_bad_filters_400(scenario, member, api_client):
    client = client_for(member)
    assert client.get(URL, {"team": "nlp"}).status_code == 404
    assert client.get(URL, {"team": "no-such-team"}).status_code == 404
    response = client.get(URL, {"since": "2026-13-01"})
    assert response.status_code == 400 and "since" in str(response.json())
    response = client.get(URL, {"since": "2026-12-01", "until": "2026-11-01"})
    assert response.status_code == 400 and "after it starts" in str(response.json())
    assert client.get(URL, {"since": "2000-01-01"}).status_code == 400  # over 366 days
    assert client.get(URL, {"kind": "nonsense"}).status_code == 400
    assert api_client.get(URL).status_code in (401, 403)


def test_api_pages_through_the_items(scenario, team_admin):
    client = client_for(team_admin)
    first = client.get(URL, {"page_size": 3}).json()
    assert len(first["results"]) == 3 and first["count"] == 4 and first["next"]
    second = client.get(first["next"]).json()
    assert len(second["results"]) == 1 and second["saving"] == "23.79"
    assert client.get(URL, {"page": 9}).status_code == 404


def test_advice_csv_has_one_line_per_finding(scenario, client):
    client.force_login(FinanceUserFactory())
    response = client.get("/efficiency/advice.csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == 5  # A, B, C, E, F: one finding each
    by_id = {(r["kind"], r["id"]): r for r in rows}
    a = by_id[("job", str(scenario.a.pk))]
    assert a["finding"] == "idle_gpus" and a["saving"] == "15.00" and a["idle_gpus"] == "3"
    assert a["suggestion"] == "request 1 GPU instead of 4" and a["activity_signal"] == "util"
    assert by_id[("booking", str(scenario.c.pk))]["finding"] == "no_show"
    assert sum(float(r["saving"]) for r in rows) == pytest.approx(36.29)


def test_advice_csv_refuses_a_bad_window(scenario, member, client):
    client.force_login(member)
    response = client.get("/efficiency/advice.csv", {"until": "yesterday"})
    assert response.status_code == 400 and b"until" in response.content


def test_team_jobs_csv_has_cost_and_efficiency(scenario, member, client):
    from datetime import timedelta

    from apps.billing.metering import meter_interval

    meter_interval(start=scenario.t0, end=scenario.t0 + timedelta(hours=6))
    client.force_login(member)
    response = client.get("/efficiency/teams/vision/jobs.csv")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    by_id = {r["job_id"]: r for r in rows}
    assert set(by_id) == {str(scenario.a.pk), str(scenario.b.pk), str(scenario.d.pk)}
    a = by_id[str(scenario.a.pk)]
    assert a["cost"] == "20.00" and a["gpu_hours"] == "8.0" and a["idle_gpus"] == "3"
    assert a["user"] == "alice" and a["currency"] == "USD"
    # B: 1 GPU-h at 2.50; D: 2 GPU-h at 2.50.
    assert by_id[str(scenario.b.pk)]["cost"] == "2.50"
    assert by_id[str(scenario.d.pk)]["cost"] == "5.00"
    assert client.get("/efficiency/teams/nlp/jobs.csv").status_code == 404


def test_page_shows_totals_items_and_empty_state(scenario, team_admin, outsider, client):
    client.force_login(team_admin)
    page = client.get("/efficiency/").content.decode()
    assert "23.79 USD" in page and f'data-item="job-{scenario.a.pk}"' in page
    assert 'data-digest="vision"' in page  # the team admin can switch its digest
    empty = client.get("/efficiency/", {"finding": "memory", "user": "bob"}).content.decode()
    assert 'data-testid="advice-empty"' in empty
    bad = client.get("/efficiency/", {"since": "not-a-date"})
    assert bad.status_code == 200 and 'data-testid="advice-errors"' in bad.content.decode()
    assert client.get("/efficiency/", {"team": "nlp"}).status_code == 404
    client.force_login(outsider)
    page = client.get("/efficiency/").content.decode()
    assert f'data-item="job-{scenario.e.pk}"' in page and f"job-{scenario.a.pk}" not in page
    assert 'data-testid="digest-settings"' not in page  # a member switches nothing


def test_team_jobs_csv_whose_query_fails_is_an_error_not_a_header_only_file(
    scenario, member, monkeypatch
):
    from django.db import DatabaseError
    from django.test import Client

    from apps.efficiency import reports

    def failing(**_):
        raise DatabaseError("ORDER BY not allowed in subqueries of compound statements")

    monkeypatch.setattr(reports, "job_figures", failing)
    client = Client(raise_request_exception=False)
    client.force_login(member)
    response = client.get("/efficiency/teams/vision/jobs.csv")
    assert response.status_code == 500
    assert "attachment" not in response.get("Content-Disposition", "")
