"""Allocated GPUs are the same answer at every range: the 24-hour chart (minute steps) and the
7-day chart (hour steps) agree for the hours both show, whatever telemetry exists. Before, the
24-hour chart counted minute rollups (the demo keeps only a few hours of them) and showed 0
GPUs allocated for hours the 7-day chart and the reservation list showed held."""

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.utils import timezone

from apps.fleet.models import Gpu
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup
from apps.telemetry.rollups import rollup_team_models
from tests.conftest import client_for
from tests.dashboards.conftest import book, rollup

pytestmark = pytest.mark.django_db


def _x(moment) -> str:
    """A chart's x value: wall-clock time in the reader's zone (here the portal's default)."""
    return moment.astimezone(ZoneInfo(settings.TIME_ZONE)).strftime("%Y-%m-%d %H:%M:%S")


def _series(user, start, end) -> tuple[list[str], dict[str, list[float]], int]:
    params = f"range=custom&start={start.isoformat()}&end={end.isoformat()}".replace("+", "%2B")
    body = client_for(user).get(f"/api/v1/dashboards/utilization/?{params}").json()
    figure = body["figures"]["allocated-busy"]
    x = figure["data"][0]["x"]
    return x, {t["name"]: t["y"] for t in figure["data"]}, body["step_seconds"]


@pytest.fixture
def bookings(fleet, team, other_team, member, outsider):
    """vision holds 2 H100 from 5h40 to 2h20 before the last whole hour, nlp 3 H100 from 4 h to
    1 h before; hour rollups exist for two days, minute rollups only for the last hour."""
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    h100 = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index"))
    book(
        team,
        member,
        h100[:2],
        hour - timedelta(hours=5, minutes=40),
        hour - timedelta(hours=2, minutes=20),
    )
    book(other_team, outsider, h100[2:5], hour - timedelta(hours=4), hour - timedelta(hours=1))
    GpuHourRollup.objects.bulk_create(
        rollup(GpuHourRollup, gpu, hour - timedelta(hours=h), util=1, busy_seconds=0)
        for h in range(1, 49)
        for gpu in h100
    )
    rollup_team_models(start=hour - timedelta(hours=48), end=hour)
    GpuMinuteRollup.objects.bulk_create(
        rollup(GpuMinuteRollup, gpu, hour - timedelta(minutes=m), util=1, busy_seconds=0)
        for m in range(1, 61)
        for gpu in h100
    )
    return hour


# Average GPUs held in the hour that starts N hours before `hour`, worked out by hand.
EXPECTED = {
    "vision allocated": {7: 0, 6: 2 * 40 / 60, 5: 2, 4: 2, 3: 2 * 40 / 60, 2: 0, 1: 0},
    "nlp allocated": {7: 0, 6: 0, 5: 0, 4: 3, 3: 3, 2: 3, 1: 0},
}


def test_24h_and_7d_charts_agree_on_allocated_gpus(platform_admin, bookings):
    hour = bookings
    fine_x, fine, fine_step = _series(platform_admin, hour - timedelta(hours=24), hour)
    coarse_x, coarse, coarse_step = _series(platform_admin, hour - timedelta(days=7), hour)
    assert (fine_step, coarse_step) == (180, 3600)
    per_hour = 3600 // fine_step
    for name, by_hour in EXPECTED.items():
        for hours_before, expected in by_hour.items():
            start = _x(hour - timedelta(hours=hours_before))
            i = fine_x.index(start)
            fine_mean = sum(fine[name][i : i + per_hour]) / per_hour
            coarse_value = coarse[name][coarse_x.index(start)]
            assert fine_mean == pytest.approx(expected, abs=1e-3), (name, hours_before)
            assert coarse_value == pytest.approx(expected, abs=1e-3), (name, hours_before)
    # Every step of the fine chart inside a booking shows its GPUs, with or without telemetry.
    i = fine_x.index(_x(hour - timedelta(hours=4)))
    assert fine["vision allocated"][i] == pytest.approx(2)
    assert fine["nlp allocated"][i] == pytest.approx(3)


def test_unallocated_is_the_rest_of_the_fleet_at_every_range(platform_admin, bookings):
    hour = bookings
    for start in (hour - timedelta(hours=24), hour - timedelta(days=7)):
        _, series, _ = _series(platform_admin, start, hour)
        for i, free in enumerate(series["unallocated"]):
            held = series["vision allocated"][i] + series["nlp allocated"][i]
            assert free + held == pytest.approx(20, abs=1e-2)  # the fixture's 20 GPUs


def test_member_sees_own_allocation_only(member, bookings):
    hour = bookings
    _, series, _ = _series(member, hour - timedelta(hours=24), hour)
    assert set(series) == {"vision allocated", "vision busy"}


def test_job_outside_a_booking_counts_as_allocated(platform_admin, team, member, bookings):
    from apps.jobs.models import Job, JobAllocation

    hour = bookings
    gpu = Gpu.objects.get(node__hostname="h100-b", index=0)
    job = Job.objects.create(
        team=team,
        submitted_by=member,
        name="train",
        argv=["true"],
        gpu_count=1,
        max_runtime_seconds=3600,
    )
    JobAllocation.objects.create(
        job=job, gpu=gpu, start=hour - timedelta(hours=9), end=hour - timedelta(hours=8, minutes=30)
    )
    fine_x, fine, _ = _series(platform_admin, hour - timedelta(hours=24), hour)
    i = fine_x.index(_x(hour - timedelta(hours=9)))
    assert sum(fine["vision allocated"][i : i + 20]) / 20 == pytest.approx(0.5, abs=1e-3)
    coarse_x, coarse, _ = _series(platform_admin, hour - timedelta(days=7), hour)
    i = coarse_x.index(_x(hour - timedelta(hours=9)))
    assert coarse["vision allocated"][i] == pytest.approx(0.5, abs=1e-3)
