"""Running jobs block bookings of their GPUs; one scheduling cycle at a time."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.jobs import dispatch, services
from apps.jobs.models import Job
from apps.reservations.selectors import busy_intervals
from apps.reservations.services import reservation_create
from portal.exceptions import ApplicationError


def _place(member, team, h100, count, runtime):
    job = services.job_submit(
        actor=member,
        team=team,
        argv=["sleep", "1"],
        gpu_model=h100,
        gpu_count=count,
        max_runtime_seconds=runtime,
    )
    assert dispatch.schedule_cycle().placed == [job.pk]
    job.refresh_from_db()
    return job


@pytest.mark.django_db
def test_running_job_gpus_are_busy_until_its_max_runtime(member, team, h100, quotas, sent):
    job = _place(member, team, h100, 8, 3 * 3600)
    now = timezone.now()
    busy = busy_intervals(start=now, end=now + timedelta(days=1), gpu_model=h100)
    held = {a.gpu_id for a in job.allocations.all()}
    assert held <= set(busy)
    for gpu_id in held:
        (s, e), *_ = busy[gpu_id]
        assert e >= (now + timedelta(hours=3)).timestamp() - 5
    # After its max runtime the GPUs are free again for bookings.
    later = busy_intervals(
        start=now + timedelta(hours=4), end=now + timedelta(hours=5), gpu_model=h100
    )
    assert not held & set(later)


@pytest.mark.django_db
def test_booking_cannot_take_gpus_of_running_jobs(
    member, team, team_admin, outsider, other_team, h100, quotas, sent
):
    _place(member, team, h100, 8, 6 * 3600)
    _place(outsider, other_team, h100, 8, 6 * 3600)  # the whole H100 fleet is running jobs
    start = (timezone.now() + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    with pytest.raises(ApplicationError):
        reservation_create(
            team=team,
            user=team_admin,
            gpu_model=h100,
            count=1,
            start=start,
            end=start + timedelta(hours=1),
        )


@pytest.mark.django_db(transaction=True)
def test_only_one_cycle_at_a_time(member, team, h100, quotas, sent):
    services.job_submit(
        actor=member,
        team=team,
        argv=["sleep", "1"],
        gpu_model=h100,
        gpu_count=1,
        max_runtime_seconds=60,
    )
    held = threading.Event()
    release = threading.Event()

    def hold_lock():
        with transaction.atomic():
            assert dispatch._acquire_cycle_lock()
            held.set()
            release.wait(10)
        connection.close()

    thread = threading.Thread(target=hold_lock)
    thread.start()
    try:
        assert held.wait(10)
        assert dispatch.schedule_cycle().locked is False
        assert Job.objects.get().status == "queued"
    finally:
        release.set()
        thread.join()
    assert dispatch.schedule_cycle().placed
