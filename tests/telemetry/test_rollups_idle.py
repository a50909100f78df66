from datetime import timedelta

import pytest
from django.core import mail

from apps.reservations.choices import ReservationStatus
from apps.reservations.models import Reservation
from apps.reservations.services import reservation_create
from apps.telemetry.choices import IdleKind
from apps.telemetry.idle import idle_bookings_check, idle_intervals_update
from apps.telemetry.ingest import store_samples
from apps.telemetry.models import (
    GpuHourRollup,
    GpuMinuteRollup,
    GpuSample,
    IdleInterval,
    IdleWarning,
)
from apps.telemetry.rollups import rollup_hours, rollup_minutes
from apps.telemetry.services import telemetry_retention

pytestmark = pytest.mark.django_db


def _feed(gpus, start, minutes, *, util=lambda gpu, i: 50, step_s=15, power=300.0):
    """Samples every `step_s` seconds; the energy counter grows by power x time."""
    rows = []
    for gpu in gpus:
        energy = 5_000_000
        for i in range(int(minutes * 60 // step_s)):
            ts = start + timedelta(seconds=i * step_s)
            rows.append((gpu.id, ts, util(gpu, i), 5, 1000 + i, power, 50, energy))
            energy += int(power * step_s * 1000)
    store_samples(rows)


@pytest.fixture
def hour_start(now):
    return now.replace(minute=0, second=0) - timedelta(hours=2)


def _rollup_rows(model):
    return sorted(
        model.objects.values_list(
            "gpu_id",
            "bucket",
            "team_id",
            "samples",
            "util_avg",
            "util_max",
            "mem_used_avg_mib",
            "mem_used_max_mib",
            "power_avg_w",
            "energy_j",
            "busy_seconds",
        )
    )


def test_minute_rollup_sums_energy_across_bucket_edges_and_attributes_team(
    fleet, member, quotas, h100, hour_start
):
    gpus = list(h100.gpus.order_by("id")[:2])
    _feed(gpus, hour_start, 60, util=lambda gpu, i: 80 if i % 2 else 0)
    written = rollup_minutes(start=hour_start, end=hour_start + timedelta(hours=1))
    assert written == 2 * 60
    minute = GpuMinuteRollup.objects.get(gpu=gpus[0], bucket=hour_start + timedelta(minutes=10))
    assert minute.samples == 4 and minute.util_avg == 40 and minute.util_max == 80
    assert minute.busy_seconds == 30.0
    # 300 W for 60 s = 18 kJ, the step into the bucket included
    assert minute.energy_j == pytest.approx(18_000)
    total = sum(GpuMinuteRollup.objects.filter(gpu=gpus[0]).values_list("energy_j", flat=True))
    assert total == pytest.approx(300 * (3600 - 15))  # every step but the very first
    rollup_hours(start=hour_start, end=hour_start + timedelta(hours=1))
    hour = GpuHourRollup.objects.get(gpu=gpus[0])
    assert hour.samples == 240 and hour.util_avg == 40
    assert hour.energy_j == pytest.approx(total) and hour.busy_seconds == 1800


def test_rollups_are_idempotent_and_sql_matches_portable_path(fleet, h100, member, quotas, now):
    start = now.replace(second=0) - timedelta(minutes=30)
    held = _active_booking(member, quotas, h100, now, count=1).holdings.get().gpu
    gpus = [held, *h100.gpus.exclude(pk=held.pk).order_by("id")[:2]]
    _feed(gpus, start, 20, util=lambda gpu, i: (gpu.id * 7 + i * 13) % 101)
    rollup_minutes(start=start, end=start + timedelta(minutes=20))
    rollup_hours(start=start, end=start + timedelta(minutes=20))
    sql_minutes, sql_hours = _rollup_rows(GpuMinuteRollup), _rollup_rows(GpuHourRollup)
    rollup_minutes(start=start, end=start + timedelta(minutes=20))  # again: same rows
    assert _rollup_rows(GpuMinuteRollup) == sql_minutes
    GpuMinuteRollup.objects.all().delete()
    GpuHourRollup.objects.all().delete()
    rollup_minutes(start=start, end=start + timedelta(minutes=20), portable=True)
    rollup_hours(start=start, end=start + timedelta(minutes=20), portable=True)
    for got, want in zip(_rollup_rows(GpuMinuteRollup), sql_minutes, strict=True):
        assert got[:4] == want[:4]
        assert got[4:] == pytest.approx(want[4:])
    for got, want in zip(_rollup_rows(GpuHourRollup), sql_hours, strict=True):
        assert got[:4] == want[:4] and got[4:] == pytest.approx(want[4:])


def _active_booking(member, quotas, h100, now, count=2):
    start = now.replace(second=0, microsecond=0)
    start -= timedelta(minutes=start.minute % 15)
    reservation = reservation_create(
        team=quotas[0].team,
        user=member,
        gpu_model=h100,
        count=count,
        start=start,
        end=start + timedelta(hours=6),
    )
    # pretend it began an hour ago, so a full idle window lies inside it
    Reservation.objects.filter(pk=reservation.pk).update(start=start - timedelta(hours=1))
    reservation.holdings.update(start=start - timedelta(hours=1))
    reservation.refresh_from_db()
    return reservation


def test_held_idle_booking_is_warned_then_released_after_grace(
    fleet, member, quotas, h100, now, django_capture_on_commit_callbacks
):
    reservation = _active_booking(member, quotas, h100, now)
    gpus = [h.gpu for h in reservation.holdings.all()]
    minute = now.replace(second=0, microsecond=0)
    _feed(gpus, minute - timedelta(minutes=40), 40, util=lambda gpu, i: 1)
    rollup_minutes(start=minute - timedelta(minutes=40), end=minute)
    with django_capture_on_commit_callbacks(execute=True):
        assert idle_bookings_check(now=now)["warned"] == 1
    assert len(mail.outbox) == 1 and "is idle" in mail.outbox[0].subject
    assert idle_bookings_check(now=now + timedelta(minutes=5))["released"] == 0
    _feed(gpus, minute, 16, util=lambda gpu, i: 2)
    rollup_minutes(start=minute, end=minute + timedelta(minutes=16))
    result = idle_bookings_check(now=now + timedelta(minutes=16))
    assert result["released"] == 1
    released = Reservation.objects.get(pk=reservation.pk)
    assert released.status == ReservationStatus.RELEASED
    assert released.released_gpu_hours > 0 and released.end_reason.startswith("idle")


def test_busy_gpu_or_missing_telemetry_is_never_released(fleet, member, quotas, h100, now):
    reservation = _active_booking(member, quotas, h100, now)
    gpus = [h.gpu for h in reservation.holdings.all()]
    minute = now.replace(second=0, microsecond=0)
    # one GPU busy now and then: the booking is in use
    _feed(
        gpus,
        minute - timedelta(minutes=40),
        40,
        util=lambda gpu, i: 90 if gpu == gpus[0] and i == 50 else 0,
    )
    rollup_minutes(start=minute - timedelta(minutes=40), end=minute)
    assert idle_bookings_check(now=now) == {"warned": 0, "released": 0, "cleared": 0}
    # no telemetry at all for another booking: never taken for idle
    GpuSample.objects.all().delete()
    GpuMinuteRollup.objects.all().delete()
    assert idle_bookings_check(now=now)["warned"] == 0


def test_team_with_idle_reclaim_off_is_left_alone(fleet, member, quotas, h100, now):
    quotas[0].team.idle_reclaim = False
    quotas[0].team.save()
    reservation = _active_booking(member, quotas, h100, now)
    minute = now.replace(second=0, microsecond=0)
    _feed(
        [h.gpu for h in reservation.holdings.all()],
        minute - timedelta(minutes=40),
        40,
        util=lambda gpu, i: 0,
    )
    rollup_minutes(start=minute - timedelta(minutes=40), end=minute)
    assert idle_bookings_check(now=now)["warned"] == 0


def test_idle_intervals_extend_minute_by_minute(fleet, member, quotas, h100, now):
    reservation = _active_booking(member, quotas, h100, now, count=1)
    held_gpu = reservation.holdings.get().gpu
    minute = now.replace(second=0, microsecond=0)
    _feed([held_gpu], minute - timedelta(minutes=3), 3, util=lambda gpu, i: 0)
    rollup_minutes(start=minute - timedelta(minutes=3), end=minute)
    for back in (2, 1, 0):
        idle_intervals_update(now=minute - timedelta(minutes=back))
    held = IdleInterval.objects.get(kind=IdleKind.HELD_IDLE)
    assert (held.gpu, held.team, held.start, held.end) == (
        held_gpu,
        quotas[0].team,
        minute - timedelta(minutes=3),
        minute,
    )
    unallocated = IdleInterval.objects.filter(kind=IdleKind.UNALLOCATED)
    assert unallocated.count() == 19  # 20 GPUs in the fleet, one held
    assert {(i.start, i.end) for i in unallocated} == {(minute - timedelta(minutes=3), minute)}


def test_retention_drops_old_raw_samples_in_batches(fleet, h100, now, settings):
    settings.TELEMETRY_RAW_RETENTION_DAYS = 7
    gpu = h100.gpus.first()
    store_samples(
        [(gpu.id, now - timedelta(days=8, seconds=i), 1, 1, 1, 1.0, 1, 1) for i in range(30)]
        + [(gpu.id, now - timedelta(days=1, seconds=i), 1, 1, 1, 1.0, 1, 1) for i in range(5)]
    )
    assert telemetry_retention(now=now)["samples"] == 30
    assert GpuSample.objects.count() == 5


def test_no_show_booking_is_warned_before_a_full_idle_window(
    fleet, member, quotas, h100, now, settings
):
    settings.IDLE_NO_SHOW_MINUTES = 15
    minute = now.replace(second=0, microsecond=0)
    start = minute - timedelta(minutes=20)
    reservation = _active_booking(member, quotas, h100, now, count=1)
    Reservation.objects.filter(pk=reservation.pk).update(start=start)
    reservation.holdings.update(start=start)
    _feed([reservation.holdings.get().gpu], start, 20, util=lambda gpu, i: 0)
    rollup_minutes(start=start, end=minute)
    assert idle_bookings_check(now=now)["warned"] == 1
    settings.IDLE_NO_SHOW_MINUTES = 25  # not yet a no-show, and younger than the idle window
    IdleWarning.objects.all().delete()
    assert idle_bookings_check(now=now)["warned"] == 0


def test_a_gpu_running_a_job_outside_bookings_is_not_unallocated(fleet, h100, team, member, now):
    """Unallocated means nobody holds the GPU: a job outside any booking holds it too (the
    idle page counted such a GPU as unallocated while metering charged it to the job)."""
    from apps.jobs.choices import JobStatus
    from apps.jobs.models import JobAllocation
    from tests.factories import JobFactory

    minute = now.replace(second=0, microsecond=0)
    running = h100.gpus.order_by("id").first()
    job = JobFactory(team=team, submitted_by=member, status=JobStatus.RUNNING)
    JobAllocation.objects.create(job=job, gpu=running, start=minute - timedelta(minutes=5))
    idle_intervals_update(now=minute)
    unallocated = set(
        IdleInterval.objects.filter(kind=IdleKind.UNALLOCATED).values_list("gpu_id", flat=True)
    )
    assert running.pk not in unallocated
    assert len(unallocated) == 19  # the other GPUs of the fleet
