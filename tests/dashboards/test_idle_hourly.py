"""The idle dashboard reads the whole hours of its window from the hourly idle sums
(IdleHourRollup) and gets the numbers it gets from the idle intervals alone; the minutely idle
update keeps the sums equal to a rebuild from the intervals."""

import random
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from django.utils import timezone

from apps.dashboards.selectors import idle as idle_selectors
from apps.dashboards.selectors.filters import parse_filters
from apps.fleet.models import Gpu
from apps.telemetry.choices import IdleKind
from apps.telemetry.idle import idle_hours_rollup, idle_intervals_update
from apps.telemetry.models import GpuMinuteRollup, IdleHourRollup, IdleInterval
from apps.telemetry.selectors import idle_hours_by_step
from tests.dashboards.conftest import book, rollup

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _sums():
    return sorted(
        IdleHourRollup.objects.values_list("bucket", "kind", "team_id", "gpu_model_id", "idle_us")
    )


def _random_intervals(now, teams, rng):
    """Minute-aligned idle stretches over 35 days of every GPU, as the minutely update leaves
    them: held idle by one of `teams`, or unallocated."""
    origin = now.replace(second=0, microsecond=0) - timedelta(days=35)
    intervals = []
    for gpu in Gpu.objects.all():
        t = origin + timedelta(minutes=rng.randint(0, 300))
        while t < now:
            end = min(t + timedelta(minutes=rng.choice([1, 7, 59, 61, 300, 1500, 4000])),
                      now.replace(second=0, microsecond=0))  # fmt: skip
            if end <= t:
                break
            kind = rng.choice(list(IdleKind))
            owner = None if kind == IdleKind.UNALLOCATED else rng.choice(teams)
            intervals.append(IdleInterval(gpu=gpu, kind=kind, team=owner, start=t, end=end))
            t = end + timedelta(minutes=rng.randint(1, 600))
    IdleInterval.objects.bulk_create(intervals)
    return origin


@pytest.mark.parametrize("portable", [False, True])
def test_idle_hours_from_the_hourly_sums_equal_those_from_the_intervals(
    fleet, team, other_team, member, platform_admin, h100, monkeypatch, portable
):
    now = timezone.now()
    origin = _random_intervals(now, [team, other_team], random.Random(5))
    assert idle_hours_rollup(start=origin, end=now, portable=portable) > 1000
    written = _sums()
    IdleHourRollup.objects.all().delete()
    idle_hours_rollup(start=origin, end=now, portable=not portable)
    assert _sums() == written  # the SQL and the Python rollups agree

    cases = [
        ({"range": "30d"}, platform_admin),
        ({"range": "7d", "gpu_model": h100.name}, platform_admin),
        ({"range": "24h"}, platform_admin),
        ({"range": "30d", "team": team.slug}, member),
        # days from 22:00 UTC: whole hours, read from the sums
        ({"range": "custom", "start": (now - timedelta(days=20)).strftime("%Y-%m-%dT00:00+02:00"),
          "end": (now - timedelta(days=3, minutes=7)).isoformat()}, platform_admin),
        # days from 18:30 UTC: not whole hours, read from the intervals
        ({"range": "custom", "start": (now - timedelta(days=9)).strftime("%Y-%m-%dT00:00+05:30")},
         platform_admin),
        # within one hour: no whole hour
        ({"range": "custom", "start": (now - timedelta(minutes=50)).isoformat()},
         platform_admin),
    ]  # fmt: skip
    used = []  # whether the steps were whole UTC hours (the sums read)

    def spy(presummed, **kwargs):
        rows = idle_hours_by_step(portable=portable, presummed=presummed, **kwargs)
        if presummed is None:
            step, first = kwargs["step"], kwargs["times"][0]
            used.append(not step % HOUR and not (first - EPOCH) % HOUR)
        return rows

    for params, user in cases:
        filters = parse_filters(params, user, now=now)
        monkeypatch.setattr(idle_selectors, "idle_hours_by_step", partial(spy, None))
        presummed = idle_selectors.idle_hours(filters)
        monkeypatch.setattr(idle_selectors, "idle_hours_by_step", partial(spy, False))
        from_intervals = idle_selectors.idle_hours(filters)
        assert presummed == from_intervals, params
        assert sum(sum(values) for values in presummed["series"].values()) > 0, params
    assert used == [True, True, True, True, True, False, True]


def test_the_minutely_idle_update_keeps_the_hourly_sums(fleet, team, member):
    gpus = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index"))
    # the three minutes before an hour and the two after it
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    book(team, member, gpus[:2], hour - timedelta(hours=1), hour + timedelta(hours=1))
    GpuMinuteRollup.objects.bulk_create(
        rollup(GpuMinuteRollup, gpu, hour + timedelta(minutes=m), team, util=0, busy_seconds=0)
        for gpu in gpus[:2]
        for m in range(-3, 3)
    )
    for m in range(-2, 3):
        idle_intervals_update(now=hour + timedelta(minutes=m))
    assert IdleInterval.objects.filter(kind=IdleKind.HELD_IDLE).count() == 2
    maintained = _sums()
    assert {row[0] for row in maintained} == {hour - timedelta(hours=1), hour}
    IdleHourRollup.objects.all().delete()
    idle_hours_rollup(start=hour - timedelta(hours=1), end=hour + timedelta(hours=1))
    assert _sums() == maintained
    # 5 minutes of every GPU (2 held idle, 18 unallocated), 3 of them in the first hour
    minute_us = 60 * 10**6
    assert sum(row[4] for row in maintained if row[0] < hour) == 20 * 3 * minute_us
    assert sum(row[4] for row in maintained) == 20 * 5 * minute_us
