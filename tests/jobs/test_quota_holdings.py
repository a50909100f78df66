"""A team's bookings and running jobs are one holding under one limit, through the booking
service and the scheduling cycle alike, and a team without a quota gets nothing by either."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs import dispatch, services
from apps.jobs.choices import JobStatus
from apps.jobs.models import Job
from apps.reservations import availability
from apps.reservations.policy import BookingPolicy
from apps.reservations.services import reservation_create
from apps.teams.models import Quota
from portal.exceptions import PolicyRefusal

pytestmark = pytest.mark.django_db


def _submit(member, team, h100, count, runtime=4 * 3600):
    return services.job_submit(
        actor=member,
        team=team,
        argv=["sleep", "1"],
        gpu_model=h100,
        gpu_count=count,
        max_runtime_seconds=runtime,
        same_node=False,
    )


def _this_slot():
    slot = availability.seconds(BookingPolicy.from_settings().slot)
    now = availability.to_epoch(timezone.now())
    return availability.from_epoch(availability.floor_to_grid(now, slot))


def _book(member, team, h100, count, hours=2):
    start = _this_slot()
    return reservation_create(
        team=team,
        user=member,
        gpu_model=h100,
        count=count,
        start=start,
        end=start + timedelta(hours=hours),
    )


def _ninth_is_refused_both_ways(member, team, h100):
    with pytest.raises(PolicyRefusal) as refusal:
        _book(member, team, h100, 1)
    assert refusal.value.code == "quota_exceeded"
    assert refusal.value.detail["booked"] == 8 and refusal.value.detail["limit"] == 8
    assert "bookings and running jobs" in str(refusal.value)
    ninth = _submit(member, team, h100, 1)
    assert dispatch.schedule_cycle().placed == []
    ninth.refresh_from_db()
    assert ninth.status == JobStatus.QUEUED
    assert ninth.pending_reason == "quota_reached"
    assert "quota of 8" in ninth.pending_message


def test_four_booked_then_four_running_on_a_limit_of_eight_leave_no_ninth(member, team, h100, sent):
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=8)
    booking = _book(member, team, h100, 4)
    assert not booking.over_quota
    four = _submit(member, team, h100, 4)
    assert dispatch.schedule_cycle().placed == [four.pk]
    # Within the limit but past the guarantee the bookings already fill.
    assert all(a.over_quota for a in Job.objects.get(pk=four.pk).allocations.all())
    _ninth_is_refused_both_ways(member, team, h100)


def test_four_running_then_four_booked_on_a_limit_of_eight_leave_no_ninth(member, team, h100, sent):
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=8)
    four = _submit(member, team, h100, 4)
    assert dispatch.schedule_cycle().placed == [four.pk]
    booking = _book(member, team, h100, 4)
    assert booking.over_quota  # the running jobs hold the guarantee
    _ninth_is_refused_both_ways(member, team, h100)


def test_the_any_model_row_bounds_bookings_and_jobs_of_every_model_together(
    member, team, h100, sent
):
    l40s = h100.__class__.objects.get(name="L40S-48GB")
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=0, limit=8)
    Quota.objects.create(team=team, gpu_model=l40s, guaranteed=0, limit=4)
    Quota.objects.create(team=team, gpu_model=None, guaranteed=0, limit=6)
    _book(member, team, l40s, 3)
    three = _submit(member, team, h100, 3)
    assert dispatch.schedule_cycle().placed == [three.pk]
    with pytest.raises(PolicyRefusal) as refusal:
        _book(member, team, h100, 1)
    assert refusal.value.detail["gpu_model"] == "all GPU models"
    one = _submit(member, team, h100, 1)
    assert dispatch.schedule_cycle().placed == []
    one.refresh_from_db()
    assert one.pending_message == "Team vision is at its quota of 6 GPUs of any model."


def test_a_team_without_a_quota_can_neither_book_nor_run(member, team, h100, sent):
    with pytest.raises(PolicyRefusal) as refusal:
        _book(member, team, h100, 1)
    assert refusal.value.detail["limit"] == 0
    job = _submit(member, team, h100, 1)
    assert dispatch.schedule_cycle().placed == []
    job.refresh_from_db()
    assert job.pending_reason == "quota_reached"
    assert job.pending_message == (
        "Team vision has no quota for H100-SXM-80GB; a platform admin gives quotas."
    )


def test_a_job_that_would_run_into_the_teams_booking_waits(member, team, h100, sent):
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=0, limit=4)
    start = _this_slot() + timedelta(hours=2)
    reservation_create(
        team=team, user=member, gpu_model=h100, count=4, start=start, end=start + timedelta(hours=2)
    )
    long = _submit(member, team, h100, 2, runtime=6 * 3600)
    short = _submit(member, team, h100, 2, runtime=3600)
    assert dispatch.schedule_cycle().placed == [short.pk]
    long.refresh_from_db()
    assert long.pending_reason == "quota_reached"
    assert "bookings" in long.pending_message


def test_the_quota_pages_count_bookings_and_running_jobs_together(member, team, h100, sent):
    from django.test import Client

    from apps.teams.selectors import quota_table

    l40s = h100.__class__.objects.get(name="L40S-48GB")
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=8)
    Quota.objects.create(team=team, gpu_model=l40s, guaranteed=0, limit=4)
    Quota.objects.create(team=team, gpu_model=None, guaranteed=4, limit=10)
    _book(member, team, h100, 4)
    four = _submit(member, team, h100, 4)
    assert dispatch.schedule_cycle().placed == [four.pk]
    rows = {
        (r["gpu_model"].name if r["gpu_model"] else None): (r["in_use"], r["peak_7d"], r["left"])
        for r in quota_table(teams=[team])
    }
    assert rows == {
        h100.name: (8, 8, 0),
        # Nothing of its own held, but the any-model row leaves 2.
        l40s.name: (0, 0, 2),
        None: (8, 8, 2),
    }
    client = Client()
    client.force_login(member)
    html = client.get("/teams/vision/").text
    table = html.split('data-testid="team-quota"', 1)[1].split("</table>", 1)[0]
    assert (
        f"<tr><td>{h100.name}</td><td>4</td><td>8</td><td>8</td><td>8</td><td>0</td></tr>" in table
    )
