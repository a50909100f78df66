"""Who holds GPU g over [s, e), with jobs (`apps.jobs.holdings`): allocations follow the
bookings' rule (half-open), a running allocation holds from its start on, and `holders`
lists both kinds."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.jobs.choices import JobStatus
from apps.jobs.holdings import allocations_holding, allocations_holding_at, holders
from apps.jobs.models import JobAllocation
from tests.factories import JobFactory, make_booking

pytestmark = pytest.mark.django_db

NINE = datetime(2026, 11, 2, 9, tzinfo=UTC)
TEN = NINE + timedelta(hours=1)


@pytest.fixture
def gpus(fleet, h100):
    return list(h100.gpus.order_by("id")[:4])


def _allocate(job, gpu, start, end=None):
    return JobAllocation.objects.create(job=job, gpu=gpu, start=start, end=end)


def test_finished_allocation_is_half_open(gpus, team, member):
    _allocate(JobFactory(team=team, submitted_by=member), gpus[0], NINE, TEN)
    hour = timedelta(hours=1)
    assert not allocations_holding(NINE - hour, NINE).exists()  # ends when it starts
    assert not allocations_holding(TEN, TEN + hour).exists()  # starts when it ends
    assert allocations_holding(TEN - timedelta(seconds=1), TEN + hour).exists()
    assert allocations_holding_at(NINE).exists()
    assert not allocations_holding_at(TEN).exists()


def test_running_allocation_holds_from_its_start_on(gpus, team, member):
    _allocate(JobFactory(team=team, submitted_by=member, status=JobStatus.RUNNING), gpus[0], NINE)
    assert allocations_holding(NINE + timedelta(days=30), NINE + timedelta(days=31)).exists()
    assert allocations_holding(NINE).exists()
    assert allocations_holding_at(NINE).exists()
    assert not allocations_holding(NINE - timedelta(hours=1), NINE).exists()


def test_zero_length_allocation_holds_at_no_instant(gpus, team, member):
    """A job stopped the moment it started: listed among a span's rows around it (it lasts
    no time there, so it counts and costs nothing), but it holds at no instant."""
    _allocate(JobFactory(team=team, submitted_by=member), gpus[0], NINE, NINE)
    assert not allocations_holding_at(NINE).exists()
    assert not allocations_holding(NINE, TEN).exists()


def test_outside_bookings_leaves_out_jobs_running_in_a_booking(gpus, team, member):
    booking = make_booking(team, member, [gpus[0]], NINE, TEN)
    inside = JobFactory(team=team, submitted_by=member, reservation=booking)
    outside = JobFactory(team=team, submitted_by=member)
    _allocate(inside, gpus[0], NINE, TEN)
    _allocate(outside, gpus[1], NINE, TEN)
    assert {a.job_id for a in allocations_holding(NINE, TEN)} == {inside.pk, outside.pk}
    assert [a.job_id for a in allocations_holding(NINE, TEN, outside_bookings=True)] == [outside.pk]


def test_holders_lists_bookings_and_jobs_of_the_gpus(gpus, team, other_team, member):
    booking = make_booking(team, member, [gpus[0]], NINE, TEN)
    job = JobFactory(team=other_team, submitted_by=member, status=JobStatus.RUNNING)
    _allocate(job, gpus[1], NINE + timedelta(minutes=5))
    _allocate(JobFactory(team=team, submitted_by=member), gpus[2], NINE - timedelta(hours=2), NINE)
    found = holders(NINE, TEN, gpu_ids=[g.pk for g in gpus])
    assert [(h.kind, h.id, h.gpu_id, h.team_id, h.end) for h in found] == [
        ("booking", booking.pk, gpus[0].pk, team.pk, TEN),
        ("job", job.pk, gpus[1].pk, other_team.pk, None),
    ]
    assert holders(NINE, TEN, gpu_ids=[gpus[3].pk]) == []


def test_booking_admissions_read_of_running_jobs_is_the_team_s_and_the_model_s_busy_intervals(
    fleet, h100, team, other_team, member
):
    """`booking_job_intervals` (raw SQL) answers what `job_busy_intervals` answers for the
    team's jobs and for the model's GPUs, with each GPU's team and model: running, dispatched
    and preempted jobs outside bookings count; finished allocations, queued jobs, jobs inside a
    booking, other teams' jobs on other models, and jobs that stop before the window do not."""
    from django.utils import timezone

    from apps.fleet.models import Gpu, GpuModel
    from apps.jobs.holdings import booking_job_intervals, job_busy_intervals

    now = timezone.now()
    h100s = list(h100.gpus.order_by("id"))
    l40s_model = GpuModel.objects.get(name="L40S-48GB")
    l40s = list(l40s_model.gpus.order_by("id"))
    window = (now + timedelta(hours=1), now + timedelta(hours=3))

    def job(job_team, status, gpu, *, runtime=86400, start=now, end=None, **fields):
        j = JobFactory(
            team=job_team, submitted_by=member, status=status, max_runtime_seconds=runtime,
            started_at=start, gpu_model=gpu.model, **fields,
        )  # fmt: skip
        _allocate(j, gpu, start, end)

    job(team, JobStatus.RUNNING, l40s[0])  # the team's, another model: counts
    job(team, JobStatus.DISPATCHED, h100s[0])
    job(other_team, JobStatus.PREEMPTED, h100s[1])  # another team's on the model: counts
    job(other_team, JobStatus.RUNNING, l40s[1])  # another team's, another model: not
    job(team, JobStatus.RUNNING, h100s[2], end=now)  # finished allocation
    job(team, JobStatus.QUEUED, h100s[3])
    job(team, JobStatus.RUNNING, h100s[4], runtime=600)  # stops before the window
    job(team, JobStatus.RUNNING, h100s[5], start=window[1])  # starts as the window ends
    booking = make_booking(team, member, [h100s[6]], now, window[1])
    job(team, JobStatus.RUNNING, h100s[6], reservation=booking)

    found = booking_job_intervals(start=window[0], end=window[1], team=team, gpu_model=h100)
    expected = set(job_busy_intervals(start=window[0], end=window[1], team=team)) | set(
        job_busy_intervals(start=window[0], end=window[1], gpu_model=h100)
    )
    assert {(gpu_id, s, e) for gpu_id, _, _, s, e in found} == expected
    assert {gpu_id for gpu_id, *_ in found} == {l40s[0].pk, h100s[0].pk, h100s[1].pk}
    owners = {g.pk: g.model.name for g in Gpu.objects.select_related("model")}
    for gpu_id, team_id, model, _, _ in found:
        assert model == owners[gpu_id]
        assert team_id == (other_team.pk if gpu_id == h100s[1].pk else team.pk)
