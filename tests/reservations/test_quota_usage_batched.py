"""The quota page reads every team's holdings at once (`teams_holdings`): the same figures
as reading them team by team, in a number of queries that does not grow with the teams."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.fleet.models import Gpu, GpuModel
from apps.jobs.choices import JobStatus
from apps.jobs.models import JobAllocation
from apps.reservations.selectors import quota_usage, team_holdings, teams_holdings
from apps.teams.models import Quota
from tests.factories import JobFactory, MembershipFactory, TeamFactory, make_booking

pytestmark = pytest.mark.django_db


def _per_team_usage(quotas, now):
    """What the quota table showed before: each team's holdings read on their own."""
    week = now + timedelta(days=7)
    usage = {}
    for quota in quotas:
        held = team_holdings(team=quota.team, start=now, end=week)
        model = quota.gpu_model.name if quota.gpu_model else None
        usage[quota.pk] = {
            "in_use": held.peak(quota.team.slug, model, now, now + timedelta(seconds=1)),
            "peak_7d": held.peak(quota.team.slug, model, now, week),
        }
    return usage


def _running(team, user, gpus, *, started, runtime_hours, model, reservation=None):
    job = JobFactory(
        team=team,
        submitted_by=user,
        status=JobStatus.RUNNING,
        started_at=started,
        max_runtime_seconds=runtime_hours * 3600,
        gpu_model=model,
        gpu_count=len(gpus),
        reservation=reservation,
    )
    JobAllocation.objects.bulk_create(
        JobAllocation(job=job, gpu=gpu, start=started) for gpu in gpus
    )
    return job


@pytest.fixture
def busy_teams(fleet, h100):
    """Five teams with model and any-model rows, holding H100 and L40S GPUs through bookings
    now and later this week, running jobs outside bookings (one past its maximum runtime),
    a job inside a booking (counted once), a finished job and a cancelled booking's rows."""
    now = timezone.now().replace(microsecond=0)
    l40s = GpuModel.objects.get(name="L40S-48GB")
    h = list(Gpu.objects.filter(model=h100).order_by("pk"))
    lg = list(Gpu.objects.filter(model=l40s).order_by("pk"))
    teams = [TeamFactory(slug=f"team-{k}") for k in range(5)]
    users = [MembershipFactory(team=team).user for team in teams]
    for team in teams:
        Quota.objects.create(team=team, gpu_model=h100, guaranteed=2, limit=6)
        Quota.objects.create(team=team, gpu_model=None, guaranteed=2, limit=8)
    Quota.objects.create(team=teams[0], gpu_model=l40s, guaranteed=1, limit=4)
    hour = timedelta(hours=1)
    # team-0: a booking now, a job inside it, an L40S job, a booking on Thursday.
    booking = make_booking(teams[0], users[0], h[0:2], now - hour, now + 2 * hour)
    _running(teams[0], users[0], h[0:1], started=now - hour, runtime_hours=3, model=h100,
             reservation=booking)  # fmt: skip
    _running(teams[0], users[0], lg[0:2], started=now - hour, runtime_hours=4, model=l40s)
    make_booking(teams[0], users[0], h[2:6], now + 3 * 24 * hour, now + 3 * 24 * hour + 2 * hour)
    # team-1: a job outside bookings now, overlapping a booking tomorrow (the peak adds them).
    _running(teams[1], users[1], h[6:8], started=now - 2 * hour, runtime_hours=30, model=h100)
    make_booking(teams[1], users[1], h[8:11], now + 24 * hour, now + 26 * hour)
    # team-2: a job past its maximum runtime (held until the kill's grace ends).
    _running(teams[2], users[2], h[11:12], started=now - 5 * hour, runtime_hours=1, model=h100)
    # team-3: a finished job and a booking that ended: nothing held.
    done = JobFactory(team=teams[3], submitted_by=users[3], status=JobStatus.SUCCEEDED)
    JobAllocation.objects.create(job=done, gpu=h[12], start=now - 3 * hour, end=now - hour)
    make_booking(teams[3], users[3], h[12:14], now - 3 * hour, now - hour)
    # team-4 holds nothing.
    return {"now": now, "teams": teams}


def test_batched_holdings_equal_team_by_team(busy_teams):
    now = busy_teams["now"]
    quotas = list(Quota.objects.select_related("team", "gpu_model").order_by("pk"))
    batched = quota_usage(quotas=quotas, now=now)
    assert batched == _per_team_usage(quotas, now)
    # Not all zeros: the fixture's holdings show.
    by_row = {(q.team.slug, q.gpu_model.name if q.gpu_model else None): q.pk for q in quotas}
    assert batched[by_row[("team-0", "H100-SXM-80GB")]] == {"in_use": 2, "peak_7d": 4}
    assert batched[by_row[("team-0", None)]] == {"in_use": 4, "peak_7d": 4}
    assert batched[by_row[("team-0", "L40S-48GB")]] == {"in_use": 2, "peak_7d": 2}
    assert batched[by_row[("team-1", "H100-SXM-80GB")]] == {"in_use": 2, "peak_7d": 5}
    assert batched[by_row[("team-2", None)]]["in_use"] == 1
    assert batched[by_row[("team-3", None)]] == {"in_use": 0, "peak_7d": 0}


def test_teams_holdings_hold_the_same_intervals_as_team_holdings(busy_teams):
    now, teams = busy_teams["now"], busy_teams["teams"]
    week = now + timedelta(days=7)
    batched = teams_holdings(teams=teams, start=now, end=week)
    for team in teams:
        one = team_holdings(team=team, start=now, end=week)
        assert {k: sorted(v) for k, v in batched[team.pk].intervals.items()} == {
            k: sorted(v) for k, v in one.intervals.items()
        }


def _page_queries(platform_admin) -> int:
    client = Client()
    client.force_login(platform_admin)
    client.get("/quotas/")  # the session and the user are read once the same way below
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/quotas/")
    assert response.status_code == 200
    return len(queries)


def test_the_quota_pages_queries_do_not_grow_with_its_teams(
    busy_teams, platform_admin, h100, django_assert_max_num_queries
):
    few = _page_queries(platform_admin)
    now = busy_teams["now"]
    gpu = Gpu.objects.filter(model=h100).order_by("-pk").first()
    for k in range(20):
        team = TeamFactory(slug=f"more-{k:02d}")
        Quota.objects.create(team=team, gpu_model=h100, guaranteed=0, limit=2)
        user = MembershipFactory(team=team).user
        start = now + timedelta(days=1, hours=k)
        make_booking(team, user, [gpu], start, start + timedelta(hours=1))
    many = _page_queries(platform_admin)
    assert many == few
    client = Client()
    client.force_login(platform_admin)
    with django_assert_max_num_queries(few):
        html = client.get("/quotas/").text
    assert 'data-quota="more-19/H100-SXM-80GB"' in html
