"""A hand-made week of jobs and bookings with minute telemetry, whose right-sizing answers the
tests compute by hand (see test_advice.py for the arithmetic).

Rates: H100 2.50 / GPU-hour, L40S 1.00 / GPU-hour. T0: two days ago, on the hour.

- job A (alice, vision): 4 H100 (h100-a 0-3) for 2 h; GPU 0 busy every minute at 90 %, 70,000
  MiB; GPUs 1-3 never busy, 500 MiB.
- job B (alice, vision): 1 H100 (h100-a 4) for 1 h; busy, 80 %, peak 20,000 MiB.
- job D (alice, vision): 2 H100 (h100-a 5-6) for 1 h; both busy, 60,000 MiB: nothing to say.
- booking C (bob, vision): 2 H100 (h100-b 0-1) booked 4 h, released idle after 1 h with no
  work at all (a no-show).
- booking F (bob, vision): 1 L40S (l40s-a 0) booked 5 h, busy the first hour (30,000 of 46,068
  MiB), idle the next two, then released.
- job E (olga, nlp): 6 H100 (h100-b 2-7) for 1 h; one GPU busy, five idle.
"""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.fleet.models import Gpu, GpuModel
from apps.jobs.choices import JobStatus
from apps.jobs.models import JobAllocation
from apps.reservations.choices import ReservationStatus
from apps.telemetry.choices import IdleKind
from apps.telemetry.models import GpuMinuteRollup, IdleInterval
from tests.factories import (
    JobFactory,
    MembershipFactory,
    RateCardFactory,
    UserFactory,
    make_booking,
)

HOUR = timedelta(hours=1)


def add_minutes(gpu, start, minutes, *, busy=60.0, util=90.0, mem=1000, mem_max=None, sm=None):
    GpuMinuteRollup.objects.bulk_create(
        GpuMinuteRollup(
            gpu=gpu,
            bucket=start + timedelta(minutes=m),
            samples=4,
            util_avg=util,
            util_max=int(util),
            mem_used_avg_mib=mem,
            mem_used_max_mib=mem_max if mem_max is not None else mem,
            busy_seconds=busy,
            sm_active_avg=sm,
        )
        for m in range(minutes)
    )


def make_job(team, user, gpus, start, hours, **fields):
    job = JobFactory(
        team=team,
        submitted_by=user,
        gpu_model=gpus[0].model,
        gpu_count=len(gpus),
        status=JobStatus.SUCCEEDED,
        started_at=start,
        finished_at=start + hours * HOUR,
        **fields,
    )
    JobAllocation.objects.bulk_create(
        JobAllocation(job=job, gpu=g, start=start, end=start + hours * HOUR, released_at=start)
        for g in gpus
    )
    return job


@dataclass
class Scenario:
    t0: object
    a: object
    b: object
    c: object
    d: object
    e: object
    f: object
    bob: object


def gpus(host, indexes):
    return [Gpu.objects.get(node__hostname=host, index=i) for i in indexes]


@pytest.fixture
def scenario(fleet, team, other_team, member, team_admin, outsider, h100):
    GpuModel.objects.filter(name="L40S-48GB").update(memory_mib=46068)
    RateCardFactory(gpu_model=h100, price_per_gpu_hour=Decimal("2.50"))
    RateCardFactory(
        gpu_model=GpuModel.objects.get(name="L40S-48GB"), price_per_gpu_hour=Decimal("1.00")
    )
    bob = MembershipFactory(team=team, user=UserFactory(username="bob")).user
    t0 = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=2)

    a_gpus = gpus("h100-a", [0, 1, 2, 3])
    a = make_job(team, member, a_gpus, t0, 2, name="job A")
    add_minutes(a_gpus[0], t0, 120, busy=60, util=90, mem=70000)
    for gpu in a_gpus[1:]:
        add_minutes(gpu, t0, 120, busy=0, util=0, mem=500)

    b_gpu = gpus("h100-a", [4])
    b = make_job(team, member, b_gpu, t0, 1, name="job B")
    add_minutes(b_gpu[0], t0, 60, busy=60, util=80, mem=15000, mem_max=20000)

    d_gpus = gpus("h100-a", [5, 6])
    d = make_job(team, member, d_gpus, t0, 1, name="job D")
    for gpu in d_gpus:
        add_minutes(gpu, t0, 60, busy=60, util=95, mem=60000)

    c_gpus = gpus("h100-b", [0, 1])
    c = make_booking(
        team,
        bob,
        c_gpus,
        t0,
        t0 + 4 * HOUR,
        status=ReservationStatus.RELEASED,
        ended_at=t0 + HOUR,
        end_reason="idle: no work",
    )
    c.holdings.update(end=t0 + HOUR)
    for gpu in c_gpus:
        add_minutes(gpu, t0, 60, busy=0, util=0, mem=0)

    f_gpu = gpus("l40s-a", [0])
    f = make_booking(
        team,
        bob,
        f_gpu,
        t0,
        t0 + 5 * HOUR,
        status=ReservationStatus.RELEASED,
        ended_at=t0 + 3 * HOUR,
        end_reason="idle: GPUs below 5%",
    )
    f.holdings.update(end=t0 + 3 * HOUR)
    add_minutes(f_gpu[0], t0, 60, busy=60, util=70, mem=30000)
    add_minutes(f_gpu[0], t0 + HOUR, 120, busy=0, util=0, mem=30000)
    IdleInterval.objects.create(
        gpu=f_gpu[0],
        kind=IdleKind.HELD_IDLE,
        team=team,
        reservation=f,
        start=t0 + HOUR,
        end=t0 + 3 * HOUR,
    )

    e_gpus = gpus("h100-b", [2, 3, 4, 5, 6, 7])
    e = make_job(other_team, outsider, e_gpus, t0, 1, name="job E")
    add_minutes(e_gpus[0], t0, 60, busy=60, util=99, mem=70000)
    for gpu in e_gpus[1:]:
        add_minutes(gpu, t0, 60, busy=0, util=0, mem=0)
    return Scenario(t0=t0, a=a, b=b, c=c, d=d, e=e, f=f, bob=bob)
