import pytest
from django.core.management import call_command
from django.db.models import Sum

from apps.reservations.models import ReservationGpu
from apps.telemetry.choices import IdleKind
from apps.telemetry.models import (
    GpuHourRollup,
    GpuMinuteRollup,
    GpuSample,
    IdleInterval,
    TeamModelHourRollup,
)

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
    # H100s report GPM metrics, the A100s and L40S do not; the month-long dashboards' sums
    # cover every hour rollup
    h100 = GpuHourRollup.objects.filter(gpu__model__name__startswith="H100")
    assert h100.exists() and not h100.filter(sm_active_avg__isnull=True).exists()
    assert not GpuHourRollup.objects.filter(
        gpu__model__name__startswith="L40S", sm_active_avg__isnull=False
    ).exists()
    assert TeamModelHourRollup.objects.aggregate(n=Sum("gpu_hours"))["n"] == hours
    call_command("seed_demo")
    assert GpuHourRollup.objects.count() == hours


def test_demo_minute_rollups_cover_the_24h_charts_and_agree_with_the_hours():
    from datetime import timedelta

    from django.db.models import Sum
    from django.db.models.functions import TruncHour
    from django.utils import timezone

    call_command("seed_demo")
    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    day_ago = this_hour - timedelta(hours=24)
    minutes = (
        GpuMinuteRollup.objects.filter(bucket__gte=day_ago, bucket__lt=this_hour)
        .annotate(hour=TruncHour("bucket"))
        .values_list("gpu_id", "hour")
        .annotate(busy=Sum("busy_seconds"))
        .order_by()
    )
    by_hour = {(gpu_id, hour): busy for gpu_id, hour, busy in minutes}
    hours = GpuHourRollup.objects.filter(bucket__gte=day_ago, bucket__lt=this_hour)
    assert hours.count() == 28 * 24
    for rollup in hours:
        assert by_hour[(rollup.gpu_id, rollup.bucket)] == rollup.busy_seconds
