"""The database-backed search (progressive look-ahead, epoch-second loading) against the pure
search over everything, on PostgreSQL."""

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.reservations import availability, selectors
from apps.reservations.models import Reservation, ReservationGpu

pytestmark = pytest.mark.django_db

SLOT = timedelta(minutes=15)


def _fill(fleet, team, user, h100, *, seed, busy_days):
    rng = random.Random(seed)
    start0 = timezone.now().replace(minute=0, second=0, microsecond=0)
    for gpu in h100.gpus.all():
        cursor = start0 + rng.randrange(0, 8) * SLOT
        while cursor < start0 + timedelta(days=busy_days):
            length = rng.randrange(4, 60) * SLOT
            reservation = Reservation.objects.create(
                team=team,
                created_by=user,
                gpu_model=h100,
                count=1,
                start=cursor,
                end=cursor + length,
            )
            ReservationGpu.objects.create(
                reservation=reservation, gpu=gpu, start=cursor, end=cursor + length
            )
            cursor += length + rng.randrange(0, 9) * SLOT


@pytest.mark.parametrize(
    ("seed", "busy_days", "count", "hours"),
    [(1, 6, 1, 1), (2, 6, 4, 3), (3, 6, 8, 4), (4, 1, 16, 2), (5, 9, 12, 6)],
)
def test_progressive_search_finds_the_same_earliest_slots_as_a_full_scan(
    fleet, team, member, h100, seed, busy_days, count, hours
):
    _fill(fleet, team, member, h100, seed=seed, busy_days=busy_days)
    now = timezone.now()
    horizon = now + timedelta(days=30)
    duration = timedelta(hours=hours)
    found = selectors.availability_search(
        gpu_model=h100, count=count, duration=duration, after=now, horizon=horizon, slot=SLOT
    )
    gpus = selectors.schedulable_gpus(gpu_model=h100)
    everything = selectors.busy_intervals(gpu_model=h100, start=now, end=horizon + duration)
    expected = availability.find_slots(
        gpus,
        everything,
        count=count,
        duration=int(duration.total_seconds()),
        after=availability.to_epoch_ceil(now),
        horizon=availability.to_epoch(horizon),
        slot=900,
        limit=5,
    )
    assert expected, "the scenario must have a slot"
    assert [availability.to_epoch(s.start) for s in found] == [
        s.start for s in expected[: len(found)]
    ]
    for got, want in zip(found, expected, strict=False):
        # a window cut at the look-ahead reports a conservative latest start
        assert availability.to_epoch(got.latest_start) <= want.latest_start
        assert {g.id for g in got.gpus} == {g.id for g in want.gpus}
