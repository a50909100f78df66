"""Jobs outside a reservation are charged for their allocations' run time; a job requeued after
a node loss is charged once per attempt, never twice for the same time; a job inside a booking
is not charged on top of the booking."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from apps.billing.choices import ChargeSource
from apps.billing.metering import meter_interval
from apps.billing.models import LedgerEntry
from apps.fleet.models import Gpu
from apps.jobs.models import Job, JobAllocation
from tests.billing.conftest import AFTER_NOV, NOV
from tests.billing.test_metering import book

pytestmark = pytest.mark.django_db


def job(team, user, **fields):
    defaults = {
        "name": "train",
        "argv": ["python", "train.py"],
        "gpu_count": 1,
        "status": "succeeded",
        "max_runtime_seconds": 86400,
        "submitted_at": NOV,
    }
    return Job.objects.create(team=team, submitted_by=user, **(defaults | fields))


def charged(**filters) -> Decimal:
    return LedgerEntry.objects.filter(**filters).aggregate(t=Sum("cost"))["t"] or Decimal(0)


def test_requeued_job_is_charged_once_per_attempt(team, member, fleet, rates):
    a = Gpu.objects.filter(node__hostname="h100-a").first()
    b = Gpu.objects.filter(node__hostname="h100-b").first()
    work = job(team, member, requeue_count=1)
    start = NOV + timedelta(days=8, hours=2)
    lost = start + timedelta(hours=1, minutes=30)
    # Attempt 1 on h100-a until its node was lost; attempt 2 on h100-b, 2 h.
    JobAllocation.objects.create(job=work, gpu=a, attempt=1, start=start, end=lost)
    JobAllocation.objects.create(
        job=work,
        gpu=b,
        attempt=2,
        start=lost + timedelta(minutes=5),
        end=lost + timedelta(hours=2, minutes=5),
    )
    meter_interval(start=NOV, end=NOV + timedelta(days=10), now=AFTER_NOV)
    assert charged(source=ChargeSource.JOB, source_id=work.pk) == Decimal("8.75")  # 3.5 h x 2.50
    per_gpu = (
        LedgerEntry.objects.filter(source=ChargeSource.JOB)
        .values("gpu_id")
        .annotate(s=Sum("gpu_seconds"))
    )
    assert {row["gpu_id"]: row["s"] for row in per_gpu} == {a.pk: 5400, b.pk: 7200}
    meter_interval(start=NOV, end=NOV + timedelta(days=10), now=AFTER_NOV)
    assert charged(source=ChargeSource.JOB, source_id=work.pk) == Decimal("8.75")


def test_a_job_inside_its_booking_is_paid_by_the_booking(team, member, fleet, rates):
    gpu = Gpu.objects.filter(node__hostname="h100-a").first()
    start = NOV + timedelta(days=3)
    reservation = book(team, member, [gpu], start, start + timedelta(hours=4))
    inside = job(team, member, reservation=reservation)
    JobAllocation.objects.create(
        job=inside, gpu=gpu, attempt=1, start=start, end=start + timedelta(hours=2)
    )
    meter_interval(start=start, end=start + timedelta(hours=4), now=AFTER_NOV)
    assert charged(source=ChargeSource.JOB) == 0
    assert charged(source=ChargeSource.RESERVATION) == Decimal("10.00")
