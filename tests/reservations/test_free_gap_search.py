"""The availability search over free gaps read by the database against the search it replaced
(every holding loaded into Python, `find_slots` over them), kept as the oracle: same
slots, same latest starts, same GPUs, on random holdings in PostgreSQL."""

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import Gpu, MaintenanceWindow
from apps.reservations import availability, selectors
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.selectors.free import EpochSeconds
from tests.reservations.loaded_search import loaded_search

pytestmark = pytest.mark.django_db

SLOT = timedelta(minutes=15)


def _fill(team, user, h100, rng, now):
    """Back-to-back holdings per GPU at odd seconds and microseconds (the epoch rounding is
    part of what is compared), some GPUs idle, a few maintenance windows."""
    for gpu in Gpu.objects.filter(model=h100):
        if rng.random() < 0.15:
            continue
        cursor = now + timedelta(
            seconds=rng.randrange(-7200, 4 * 3600), microseconds=rng.randrange(10**6)
        )
        for _ in range(rng.randrange(1, 12)):
            length = timedelta(
                seconds=rng.randrange(600, 30 * 3600), microseconds=rng.randrange(10**6)
            )
            reservation = Reservation.objects.create(
                team=team,
                created_by=user,
                gpu_model=h100,
                count=1,
                start=cursor,
                end=cursor + length,
            )
            ReservationGpu.objects.create(
                reservation=reservation,
                gpu=gpu,
                start=cursor,
                end=cursor + length,
                active=rng.random() > 0.1,
            )
            cursor += length + timedelta(seconds=rng.choice([0, 0, rng.randrange(60, 12 * 3600)]))
    for node in {gpu.node for gpu in Gpu.objects.filter(model=h100)}:
        if rng.random() < 0.5:
            start = now + timedelta(hours=rng.randrange(0, 72), seconds=rng.randrange(3600))
            MaintenanceWindow.objects.create(
                node=node, start=start, end=start + timedelta(hours=rng.randrange(1, 20))
            )


@pytest.mark.parametrize("seed", range(12))
def test_gap_search_answers_as_the_loaded_search_did(fleet, team, member, h100, seed):
    rng = random.Random(seed)
    now = timezone.now()
    _fill(team, member, h100, rng, now)
    horizon = now + timedelta(days=rng.choice([3, 10, 30]))
    for _ in range(8):
        after = now + timedelta(seconds=rng.randrange(0, 2 * 86400))
        blocked = ()
        if rng.random() < 0.3:
            b = availability.to_epoch(after) + rng.randrange(0, 86400)
            blocked = [(b, b + rng.randrange(900, 12 * 3600))]
        ask = {
            "gpu_model": h100,
            "count": rng.choice([1, 2, 3, 4, 8, 12, 16]),
            "duration": rng.randrange(1, 40) * SLOT,
            "after": after,
            "horizon": horizon,
            "slot": SLOT,
            "same_node": rng.random() < 0.3,
            "limit": rng.choice([1, 5, 10]),
            "blocked": blocked,
        }
        found = [
            (s.start, s.latest_start, sorted(g.id for g in s.gpus))
            for s in selectors.availability_search(**ask)
        ]
        assert found == loaded_search(**ask), ask


def test_epoch_seconds_round_as_python_does(fleet, team, member, h100):
    rng = random.Random(7)
    base = timezone.now().replace(microsecond=0)
    gpu = Gpu.objects.filter(model=h100).first()
    moments = [base, base + timedelta(microseconds=1), base - timedelta(microseconds=1)]
    moments += [
        base + timedelta(seconds=rng.randrange(-(10**8), 10**8), microseconds=rng.randrange(10**6))
        for _ in range(200)
    ]
    for moment in moments:
        reservation = Reservation.objects.create(
            team=team, created_by=member, gpu_model=h100, count=1, start=moment, end=moment + SLOT
        )
        ReservationGpu.objects.create(
            reservation=reservation,
            gpu=gpu,
            start=moment,
            end=moment + timedelta(microseconds=1),
            active=False,
        )
    rows = ReservationGpu.objects.annotate(
        down=EpochSeconds("start"), up=EpochSeconds("start", round_up=True)
    ).values_list("start", "down", "up")
    assert len(rows) == len(moments)
    for moment, down, up in rows:
        assert (down, up) == (availability.to_epoch(moment), availability.to_epoch_ceil(moment))


@pytest.mark.parametrize("seed", range(6))
def test_later_rounds_answer_as_the_loaded_search_did(fleet, team, member, h100, seed):
    """Every GPU booked back to back for days with gaps shorter than the bookings asked for:
    the windows lie in the look-ahead's later rounds, which share one read of the holdings
    (cut at each round's end); they must be those the loaded search finds round by round."""
    rng = random.Random(100 + seed)
    now = timezone.now()
    for gpu in Gpu.objects.filter(model=h100):
        cursor = now + timedelta(seconds=rng.randrange(-3600, 3600))
        end = now + timedelta(days=rng.uniform(2, 20))
        holdings = []
        while cursor < end:
            length = timedelta(seconds=rng.randrange(3600, 20 * 3600))
            holdings.append((cursor, cursor + length))
            cursor += length + timedelta(seconds=rng.randrange(0, 2 * 3600))
        reservations = Reservation.objects.bulk_create(
            Reservation(team=team, created_by=member, gpu_model=h100, count=1, start=s, end=e)
            for s, e in holdings
        )
        ReservationGpu.objects.bulk_create(
            ReservationGpu(reservation=r, gpu=gpu, start=r.start, end=r.end) for r in reservations
        )
    for _ in range(6):
        ask = {
            "gpu_model": h100,
            "count": rng.choice([1, 2, 4, 8, 12, 16]),
            "duration": rng.randrange(8, 48) * SLOT,
            "after": now + timedelta(seconds=rng.randrange(0, 86400)),
            "horizon": now + timedelta(days=rng.choice([10, 30])),
            "slot": SLOT,
            "same_node": rng.random() < 0.3,
            "limit": rng.choice([1, 5, 10]),
        }
        found = [
            (s.start, s.latest_start, sorted(g.id for g in s.gpus))
            for s in selectors.availability_search(**ask)
        ]
        assert found == loaded_search(**ask), ask
