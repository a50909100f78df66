"""The booking form answers what was asked: one error for an off-grid start, suggestions from
the start typed (in the person's zone), and the GPUs the team may book rather than the fleet's
free ones."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from apps.jobs.choices import JobStatus
from apps.jobs.models import JobAllocation
from apps.reservations import selectors
from apps.reservations.services import reservation_create
from apps.teams.models import Quota
from tests.conftest import client_for
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _post_booking(client, **fields):
    data = {"team": "vision", "gpu_model": "H100-SXM-80GB", "count": 1, "tz_offset": 0}
    return client.post("/reservations/new/", {**data, **fields}).text


def _errors(html: str) -> list[str]:
    return re.findall(r'class="error"[^>]*>([^<]+)<', html)


def test_off_grid_start_gets_only_the_start_error(client, member, quotas, tomorrow_9):
    client.force_login(member)
    start = tomorrow_9.replace(hour=10, minute=7)
    html = _post_booking(client, start=start.strftime("%Y-%m-%dT%H:%M"), duration_hours="2")
    assert _errors(html) == ["The start must be on the 15-minute grid."]


def test_duration_off_the_grid_is_shown_under_the_duration(client, member, quotas, tomorrow_9):
    client.force_login(member)
    html = _post_booking(client, start=tomorrow_9.strftime("%Y-%m-%dT%H:%M"), duration_hours="1.1")
    assert 'id="id_duration_hours-error">The duration must be a multiple of 15 minutes.' in html
    assert len(_errors(html)) == 1


def test_api_off_grid_start_is_one_400_on_start(member, quotas, h100, tomorrow_9):
    start = tomorrow_9.replace(hour=10, minute=7)
    response = client_for(member).post(
        "/api/v1/reservations/",
        {
            "team": "vision",
            "gpu_model": h100.name,
            "count": 1,
            "start": start.isoformat(),
            "end": (start + timedelta(hours=2)).isoformat(),
        },
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["detail"] == {"start": ["The start must be on the 15-minute grid."]}


def _suggested_starts(html: str) -> list[datetime]:
    section = html.split('data-testid="suggestions"', 1)[1].split("</ol>", 1)[0]
    return [datetime.fromisoformat(v) for v in re.findall(r'data-fill-start="([^"]+)"', section)]


def test_find_free_slots_searches_from_the_local_start_typed(client, member, quotas):
    """Someone in New York (UTC-5 in winter, offset +300) asks for 20:00 the day after
    tomorrow: 01:00 UTC the day after. Nothing is booked, so that is the first suggestion,
    not a slot tonight or a day early."""
    client.force_login(member)
    day = (timezone.now() + timedelta(days=2)).date()
    html = client.get(
        "/reservations/new/",
        {
            "team": "vision",
            "gpu_model": "H100-SXM-80GB",
            "count": 2,
            "duration_hours": 2,
            "start": f"{day.isoformat()}T20:00",
            "tz_offset": 300,
        },
    ).text
    starts = _suggested_starts(html)
    wanted = datetime(day.year, day.month, day.day, 20, tzinfo=UTC) + timedelta(hours=5)
    assert starts and starts[0] == wanted
    assert all(s >= wanted for s in starts)


def test_find_free_slots_without_a_start_searches_from_now(client, member, quotas):
    client.force_login(member)
    html = client.get(
        "/reservations/new/",
        {"team": "vision", "gpu_model": "H100-SXM-80GB", "count": 2, "start": "not a time"},
    ).text
    starts = _suggested_starts(html)
    assert starts and starts[0] - timezone.now() < timedelta(minutes=15)


def _timeline_cells(html: str) -> list[int]:
    table = html.split('data-testid="timeline"', 1)[1].split("</table>", 1)[0]
    return [int(v) for v in re.findall(r'<td class="free-cell[^"]*"[^>]*>(\d+)</td>', table)]


def test_timeline_counts_what_the_team_may_book(client, member, quotas, h100, tomorrow_9):
    """16 H100 are free, but vision may hold 12 and holds 10 tomorrow from 9 to 12: its
    timeline says 12 where it holds nothing and 2 beside its booking."""
    reservation_create(
        team=quotas[0].team, user=member, gpu_model=h100, count=10, start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=3),
    )  # fmt: skip
    client.force_login(member)
    cells = _timeline_cells(
        client.get("/reservations/new/", {"team": "vision", "gpu_model": h100.name}).text
    )
    assert cells and max(cells) == 12
    assert 2 in cells and 16 not in cells
    points = dict(
        selectors.free_capacity(
            gpu_model=h100,
            start=tomorrow_9,
            end=tomorrow_9 + timedelta(hours=6),
            bucket=timedelta(hours=3),
            team=quotas[0].team,
        )
    )
    assert points == {tomorrow_9: 2, tomorrow_9 + timedelta(hours=3): 12}
    fleet = dict(
        selectors.free_capacity(
            gpu_model=h100, start=tomorrow_9, end=tomorrow_9 + timedelta(hours=3),
            bucket=timedelta(hours=3),
        )
    )  # fmt: skip
    assert fleet == {tomorrow_9: 6}


def test_any_model_row_bounds_the_timeline_too(client, member, quotas, h100, team):
    Quota.objects.create(team=team, gpu_model=None, guaranteed=0, limit=5)
    start = timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    points = selectors.free_capacity(
        gpu_model=h100, start=start, end=start + timedelta(hours=3), bucket=timedelta(hours=3),
        team=team,
    )  # fmt: skip
    assert points == [(start, 5)]


def test_quota_blocked_windows_count_running_jobs(member, team, quotas, h100):
    """vision runs a 12-GPU job outside bookings for the next hour: a booking of 1 more H100 may
    not overlap that hour (the booking rule counts running jobs), and the suggestions know it."""
    now = timezone.now().replace(second=0, microsecond=0)
    job = JobFactory(
        team=team, status=JobStatus.RUNNING, gpu_count=12, max_runtime_seconds=3600,
        started_at=now,
    )  # fmt: skip
    for gpu in h100.gpus.all()[:12]:
        JobAllocation.objects.create(job=job, gpu=gpu, start=now)
    blocked = selectors.team_quota_blocked(
        team=team, gpu_model=h100, count=1, start=now, end=now + timedelta(hours=3)
    )
    assert len(blocked) == 1
    start, end = blocked[0]
    assert start == int(now.timestamp()) and end >= int((now + timedelta(hours=1)).timestamp())
    slots = selectors.slots_from_now(
        gpu_model=h100, count=1, duration=timedelta(hours=1), team=team
    )
    assert slots and slots[0].start >= now + timedelta(hours=1)
