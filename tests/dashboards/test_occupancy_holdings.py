"""The occupancy chart shows what the holding rows say was held (`apps.reservations.holdings`):
a booking cancelled half-way shows the part it ran (metering charges that part), which the
chart used to hide by leaving out every cancelled booking."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.dashboards.selectors.filters import Filters
from apps.dashboards.selectors.occupancy import occupancy
from apps.fleet.models import Gpu
from apps.jobs.choices import JobStatus
from apps.jobs.models import JobAllocation
from apps.reservations.models import ReservationGpu
from apps.reservations.services import reservation_cancel
from tests.factories import JobFactory, make_booking

pytestmark = pytest.mark.django_db


def test_a_booking_cancelled_half_way_shows_up_to_the_cancel(fleet, h100, team, member):
    now = timezone.now()
    gpu = h100.gpus.order_by("id").first()
    ran = make_booking(team, member, [gpu], now - timedelta(hours=2), now + timedelta(hours=2))
    never = make_booking(
        team,
        member,
        [h100.gpus.order_by("id")[1]],
        now + timedelta(hours=1),
        now + timedelta(hours=3),
    )
    reservation_cancel(reservation=ran, actor=member)
    reservation_cancel(reservation=never, actor=member)
    filters = Filters(
        start=now - timedelta(hours=6),
        end=now + timedelta(hours=6),
        range="custom",
        teams=(team,),
        team_slug="",
        gpu_model=None,
        sees_all=False,
    )
    items = occupancy(filters)
    assert [item["label"] for item in items] == [f"booking #{ran.pk}"]
    assert items[0]["start"] == now - timedelta(hours=2)
    assert now <= items[0]["end"] < now + timedelta(minutes=1)


def test_bars_name_the_gpus_bookings_and_jobs_as_their_rows_do(fleet, h100, team, member):
    """Read as columns, the bars carry what the model instances say: the GPU as it prints (a
    MIG device with its profile), the team, the booking or job, and the times clipped."""
    now = timezone.now()
    gpus = list(h100.gpus.order_by("id")[:2])
    mig = Gpu.objects.create(
        node=gpus[0].node, index=gpus[0].index, uuid="MIG-occupancy", model=h100,
        mig_parent=gpus[0], mig_profile="1g.10gb",
    )  # fmt: skip
    make_booking(team, member, [gpus[0], mig], now - timedelta(hours=9), now + timedelta(hours=2))
    job = JobFactory(team=team, submitted_by=member, status=JobStatus.RUNNING, name="train")
    JobAllocation.objects.create(job=job, gpu=gpus[1], start=now - timedelta(hours=1))
    filters = Filters(
        start=now - timedelta(hours=6), end=now + timedelta(hours=6), range="custom",
        teams=(team,), team_slug="", gpu_model=None, sees_all=False,
    )  # fmt: skip
    items = occupancy(filters)
    bookings = ReservationGpu.objects.filter(reservation__team=team).order_by("gpu_id", "start")
    assert [(i["gpu"], i["kind"], i["team"], i["label"], i["start"]) for i in items] == [
        *((str(h.gpu), "booking", team.slug, f"booking #{h.reservation_id}", filters.start)
          for h in bookings),
        (str(gpus[1]), "job", team.slug, f"job #{job.pk} train", now - timedelta(hours=1)),
    ]  # fmt: skip
    # bookings end when their holding does; the running job now
    assert [i["end"] for i in items[:2]] == [h.end for h in bookings]
    assert now <= items[2]["end"] <= timezone.now()
    assert str(mig).endswith(" MIG 1g.10gb")
