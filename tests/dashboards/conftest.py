from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import Gpu
from apps.reservations.choices import ReservationStatus
from apps.telemetry.choices import IdleKind
from apps.telemetry.idle import idle_hours_rollup
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup, IdleInterval
from apps.telemetry.rollups import rollup_team_models
from tests.factories import make_booking


def rollup(model, gpu, bucket, team=None, util=50.0, busy_seconds=None):
    size = 60 if model is GpuMinuteRollup else 3600
    return model(
        gpu=gpu,
        bucket=bucket,
        team=team,
        samples=10,
        util_avg=util,
        util_max=int(util),
        busy_seconds=size if busy_seconds is None else busy_seconds,
    )


def book(team, user, gpus, start, end, status=ReservationStatus.ACTIVE):
    return make_booking(team, user, gpus, start, end, status=status)


@pytest.fixture
def history(fleet, team, other_team, member, outsider):
    """Two days of hour rollups and the last hour of minute rollups: vision holds h100-a
    gpu0-1 (busy), nlp holds gpu2 (idle); the L40S GPUs are unallocated. Idle intervals for
    nlp's held-idle GPU and an unallocated L40S."""
    now = timezone.now().replace(second=0, microsecond=0)
    gpus = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index"))
    l40s = Gpu.objects.filter(node__hostname="l40s-a").order_by("index").first()
    hour0 = now.replace(minute=0) - timedelta(hours=48)
    hours, minutes = [], []
    for h in range(48):
        bucket = hour0 + timedelta(hours=h)
        hours += [
            rollup(GpuHourRollup, gpus[0], bucket, team, util=80),
            rollup(GpuHourRollup, gpus[1], bucket, team, util=60),
            rollup(GpuHourRollup, gpus[2], bucket, other_team, util=0, busy_seconds=0),
            rollup(GpuHourRollup, l40s, bucket, None, util=0, busy_seconds=0),
        ]
    for m in range(60):
        bucket = now - timedelta(minutes=60 - m)
        minutes += [
            rollup(GpuMinuteRollup, gpus[0], bucket, team, util=80),
            rollup(GpuMinuteRollup, gpus[2], bucket, other_team, util=0, busy_seconds=0),
        ]
    GpuHourRollup.objects.bulk_create(hours)
    rollup_team_models(start=hour0, end=now)  # what rollup_hours does with the hours it writes
    GpuMinuteRollup.objects.bulk_create(minutes)
    book(team, member, gpus[:2], now - timedelta(hours=2), now + timedelta(hours=2))
    book(other_team, outsider, gpus[2:3], now - timedelta(hours=2), now + timedelta(hours=2))
    IdleInterval.objects.create(
        gpu=gpus[2],
        kind=IdleKind.HELD_IDLE,
        team=other_team,
        start=now - timedelta(hours=3),
        end=now - timedelta(hours=1),
    )
    IdleInterval.objects.create(
        gpu=l40s, kind=IdleKind.UNALLOCATED, start=now - timedelta(hours=5), end=now
    )
    idle_hours_rollup(start=now - timedelta(hours=5), end=now)  # as the minutely update does
    return {"now": now, "gpus": gpus, "l40s": l40s}
