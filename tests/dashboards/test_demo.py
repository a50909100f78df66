import pytest
from django.core.management import call_command

from apps.reservations.models import ReservationGpu
from apps.telemetry.choices import IdleKind
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup, GpuSample, IdleInterval

pytestmark = pytest.mark.django_db


def test_seed_demo_writes_30_days_of_telemetry_matching_bookings_once():
    call_command("seed_demo")
    hours = GpuHourRollup.objects.count()
    assert hours == 28 * 30 * 24
    assert GpuMinuteRollup.objects.exists()
    assert GpuSample.objects.count() == 28
    assert IdleInterval.objects.filter(kind=IdleKind.UNALLOCATED, team__isnull=True).exists()
    assert IdleInterval.objects.filter(kind=IdleKind.HELD_IDLE, team__isnull=False).exists()
    # A held hour belongs to the team whose booking covers it.
    held = GpuHourRollup.objects.filter(team__isnull=False).first()
    assert ReservationGpu.objects.filter(
        gpu=held.gpu,
        reservation__team=held.team,
        start__lte=held.bucket,
        end__gt=held.bucket,
        active=True,
    ).exists()
    call_command("seed_demo")
    assert GpuHourRollup.objects.count() == hours
