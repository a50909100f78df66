import time
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from apps.reservations.choices import ReservationStatus
from apps.reservations.lifecycle import reservation_lifecycle_tick
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.services import reservation_create, reservation_release
from portal.exceptions import ConflictError


def _book(member, quotas, h100, start, hours=2, count=2):
    return reservation_create(
        team=quotas[0].team,
        user=member,
        gpu_model=h100,
        count=count,
        start=start,
        end=start + timedelta(hours=hours),
    )


@pytest.mark.django_db
def test_tick_starts_finishes_and_reminds_once(
    member, quotas, h100, tomorrow_9, django_capture_on_commit_callbacks
):
    reservation = _book(member, quotas, h100, tomorrow_9)
    assert reservation_lifecycle_tick(now=tomorrow_9 - timedelta(minutes=1))["activated"] == 0
    assert reservation_lifecycle_tick(now=tomorrow_9)["activated"] == 1
    assert Reservation.objects.get(pk=reservation.pk).status == ReservationStatus.ACTIVE
    near_end = tomorrow_9 + timedelta(hours=1, minutes=40)
    with django_capture_on_commit_callbacks(execute=True):
        assert reservation_lifecycle_tick(now=near_end)["reminded"] == 1
        assert reservation_lifecycle_tick(now=near_end)["reminded"] == 0  # idempotent
    assert len(mail.outbox) == 1 and "ends in 20 minutes" in mail.outbox[0].subject
    assert mail.outbox[0].to == [member.email]
    done = reservation_lifecycle_tick(now=tomorrow_9 + timedelta(hours=2))
    assert done["completed"] == 1
    assert Reservation.objects.get(pk=reservation.pk).status == ReservationStatus.COMPLETED
    assert reservation_lifecycle_tick(now=tomorrow_9 + timedelta(hours=3)) == {
        "activated": 0,
        "completed": 0,
        "reminded": 0,
    }


@pytest.mark.django_db
def test_release_frees_the_rest_and_records_released_hours(member, quotas, h100):
    now = timezone.now()
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=now.minute % 15)
    reservation = _book(member, quotas, h100, start, hours=4, count=2)
    released = reservation_release(reservation=reservation, reason="idle for 60 minutes")
    assert released.status == ReservationStatus.RELEASED
    expected = 2 * (reservation.end - released.ended_at).total_seconds() / 3600
    assert float(released.released_gpu_hours) == pytest.approx(expected, abs=0.01)
    assert all(
        h.end <= timezone.now() for h in ReservationGpu.objects.filter(reservation=reservation)
    )
    with pytest.raises(ConflictError):
        reservation_release(reservation=reservation, reason="again")
    # the freed GPUs can be booked for the rest of the window right away
    again = _book(member, quotas, h100, start + timedelta(minutes=15), hours=3, count=8)
    assert again.count == 8


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_lifecycle_task_runs_on_a_real_celery_worker(member, quotas, h100):
    from celery.contrib.testing.worker import start_worker

    from apps.reservations.tasks import lifecycle_tick
    from portal.celery import app

    now = timezone.now()
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=now.minute % 15)
    reservation = _book(member, quotas, h100, start, hours=1)
    Reservation.objects.filter(pk=reservation.pk).update(status=ReservationStatus.SCHEDULED)
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
        lifecycle_tick.delay()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if Reservation.objects.get(pk=reservation.pk).status == ReservationStatus.ACTIVE:
                break
            time.sleep(0.2)
    assert Reservation.objects.get(pk=reservation.pk).status == ReservationStatus.ACTIVE
