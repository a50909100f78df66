"""The booking form guides: a model the team can book, slots its quota allows, a clean URL."""

import re
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import GpuModel
from apps.reservations import selectors
from apps.reservations.services import reservation_create
from apps.teams.models import Quota

pytestmark = pytest.mark.django_db


def _selected_model(html: str) -> str:
    select = html.split('name="gpu_model"', 1)[1].split("</select>", 1)[0]
    return re.search(r'<option value="([^"]+)"[^>]*selected', select).group(1)


def test_form_defaults_to_a_model_the_team_has_quota_for(client, member, team, fleet):
    l40s = GpuModel.objects.get(name="L40S-48GB")
    Quota.objects.create(team=team, gpu_model=l40s, guaranteed=1, limit=2)
    assert GpuModel.objects.order_by("name").first().name != "L40S-48GB"
    client.force_login(member)
    html = client.get("/reservations/new/").text
    assert _selected_model(html) == "L40S-48GB"
    assert "Suggested slots · L40S-48GB" in html


def _first_suggestion(html: str) -> datetime:
    section = html.split('data-testid="suggestions"', 1)[1]
    return datetime.fromisoformat(re.search(r'data-fill-start="([^"]+)"', section).group(1))


def test_suggested_slots_respect_the_teams_quota_and_can_be_booked(
    client, member, team, quotas, h100
):
    # vision may hold 12 H100; it already holds 11 for the next day, so 2 more fit only after.
    start = timezone.now().replace(second=0, microsecond=0) + timedelta(minutes=30)
    start = start.replace(minute=(start.minute // 15) * 15)
    held = reservation_create(
        team=team, user=member, gpu_model=h100, count=11, start=start, end=start + timedelta(days=1)
    )
    client.force_login(member)
    html = client.get(
        "/reservations/new/", {"team": "vision", "gpu_model": h100.name, "count": 2}
    ).text
    suggested = _first_suggestion(html)
    assert suggested + timedelta(hours=4) <= held.start or suggested >= held.end
    # ... and booking the suggested slot is not refused on quota.
    reservation_create(
        team=team, user=member, gpu_model=h100, count=2, start=suggested,
        end=suggested + timedelta(hours=4),
    )  # fmt: skip


def test_quota_blocked_windows_match_the_booking_rule(member, team, quotas, h100, tomorrow_9):
    reservation_create(
        team=team,
        user=member,
        gpu_model=h100,
        count=12,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=2),
    )
    blocked = selectors.team_quota_blocked(
        team=team,
        gpu_model=h100,
        count=1,
        start=tomorrow_9 - timedelta(hours=1),
        end=tomorrow_9 + timedelta(hours=5),
    )
    assert blocked == [
        (int(tomorrow_9.timestamp()), int((tomorrow_9 + timedelta(hours=2)).timestamp()))
    ]
    assert (
        selectors.team_quota_blocked(
            team=team, gpu_model=h100, count=13, start=tomorrow_9, end=tomorrow_9 + timedelta(1)
        )
        != []
    )


def test_team_without_quota_for_the_model_gets_no_suggestions(client, member, team, fleet):
    client.force_login(member)
    html = client.get("/reservations/new/", {"gpu_model": "H100-SXM-80GB", "count": 1}).text
    assert "data-fill-start" not in html.split('data-testid="suggestions"', 1)[1]
    assert "quota of vision" in html


def test_find_free_slots_keeps_the_csrf_token_out_of_the_url(client, member, quotas):
    client.force_login(member)
    response = client.get(
        "/reservations/new/",
        {"csrfmiddlewaretoken": "secret", "gpu_model": "H100-SXM-80GB", "count": "3"},
    )
    assert response.status_code == 302
    assert "csrfmiddlewaretoken" not in response["Location"]
    assert "count=3" in response["Location"] and "gpu_model=H100-SXM-80GB" in response["Location"]
