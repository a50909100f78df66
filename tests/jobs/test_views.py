"""Job pages: queue with filters and empty state, submit form, detail with cancel."""

import pytest

from apps.jobs import services
from apps.jobs.choices import JobStatus
from apps.jobs.forms import parse_argv
from apps.jobs.models import Job

pytestmark = pytest.mark.django_db


def test_empty_queue_page(client, member):
    client.force_login(member)
    page = client.get("/jobs/").content.decode()
    assert "No jobs here yet" in page
    assert 'href="/jobs/"' in page  # the nav link


def test_submit_form_one_arg_per_line_and_env(client, member, fleet, sent):
    client.force_login(member)
    response = client.post(
        "/jobs/submit/",
        {
            "team": "vision",
            "name": "bert",
            "argv": "python\ntrain.py\n--lr=0.1 ; rm -rf /\n",
            "env": "SEED=1\nPATHS=a=b\n",
            "gpu_model": "H100-SXM-80GB",
            "gpu_count": 2,
            "same_node": "on",
            "max_runtime_minutes": 30,
            "priority_class": "over_quota",
        },
    )
    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.argv == ["python", "train.py", "--lr=0.1 ; rm -rf /"]
    assert job.env == {"SEED": "1", "PATHS": "a=b"}
    assert job.max_runtime_seconds == 1800
    detail = client.get(response.url).content.decode()
    assert "Why is it pending?" in detail and "Cancel job" in detail


def test_submit_form_shows_service_errors_by_field(client, member, fleet, sent):
    client.force_login(member)
    response = client.post(
        "/jobs/submit/",
        {
            "team": "vision",
            "argv": '["python"]',
            "env": "1BAD=x",
            "gpu_model": "H100-SXM-80GB",
            "gpu_count": 9,
            "same_node": "on",
            "max_runtime_minutes": 30,
            "priority_class": "over_quota",
        },
    )
    assert response.status_code == 200
    assert "not a valid variable name" in response.content.decode()
    assert not Job.objects.exists()


def test_parse_argv_json_and_bad_json():
    from django import forms

    assert parse_argv('["a b", "c"]') == ["a b", "c"]
    with pytest.raises(forms.ValidationError):
        parse_argv("[1, 2]")
    with pytest.raises(forms.ValidationError):
        parse_argv('["unterminated"')


def test_detail_of_other_team_is_404_and_cancel_works(client, member, outsider, team, fleet, sent):
    job = services.job_submit(
        actor=member, team=team, argv=["true"], gpu_count=1, max_runtime_seconds=60
    )
    client.force_login(outsider)
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    client.force_login(member)
    listing = client.get("/jobs/", {"status": "queued"}).content.decode()
    assert f'data-job="{job.pk}"' in listing
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 302
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert "Cancel job" not in client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'data-job="{job.pk}"' not in client.get("/jobs/", {"status": "queued"}).content.decode()


def test_finance_user_sees_but_cannot_cancel(client, member, team, finance_user, fleet, sent):
    job = services.job_submit(
        actor=member, team=team, argv=["true"], gpu_count=1, max_runtime_seconds=60
    )
    from tests.conftest import client_for

    response = client_for(finance_user).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED


def _selected(html: str, name: str) -> str:
    import re

    select = html.split(f'name="{name}"', 1)[1].split("</select>", 1)[0]
    return re.search(r'<option value="([^"]*)"[^>]*selected', select).group(1)


def test_submit_form_defaults_to_guaranteed_class_when_the_team_has_a_guarantee(
    client, member, quotas
):
    client.force_login(member)
    assert _selected(client.get("/jobs/submit/").text, "priority_class") == "guaranteed"


def test_submit_form_defaults_to_over_quota_without_a_guarantee(client, member, team, h100):
    from apps.teams.models import Quota

    Quota.objects.create(team=team, gpu_model=h100, guaranteed=0, limit=4)
    client.force_login(member)
    assert _selected(client.get("/jobs/submit/").text, "priority_class") == "over_quota"


def test_waiting_job_page_follows_the_job_from_the_api(client, member, team, fleet, sent):
    job = services.job_submit(
        actor=member, team=team, argv=["true"], gpu_count=1, max_runtime_seconds=60
    )
    client.force_login(member)
    html = client.get(f"/jobs/{job.pk}/").text
    assert f'data-job-poll="/api/v1/jobs/{job.pk}/"' in html
    assert 'data-job-status="queued"' in html and "js/job.js" in html
    polled = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert polled["status"] == "queued" and "pending_message" in polled
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    assert "data-job-poll" not in client.get(f"/jobs/{job.pk}/").text


def test_job_blocked_by_a_booking_gets_the_bookings_end_as_estimated_start(
    client, member, outsider, team, quotas, h100, fleet, sent
):
    from datetime import timedelta

    from django.utils import timezone

    from apps.jobs import dispatch
    from apps.reservations.services import reservation_create

    start = timezone.now().replace(second=0, microsecond=0) + timedelta(minutes=15)
    start = start.replace(minute=(start.minute // 15) * 15)
    booking = reservation_create(
        team=quotas[1].team, user=outsider, gpu_model=h100, count=16, start=start,
        end=start + timedelta(hours=2),
    )  # fmt: skip
    job = services.job_submit(
        actor=member, team=team, argv=["true"], gpu_model=h100, gpu_count=1,
        max_runtime_seconds=3 * 3600,
    )  # fmt: skip
    dispatch.schedule_cycle()
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert job.estimated_start == booking.end
    client.force_login(member)
    html = client.get(f"/jobs/{job.pk}/").text
    assert "No estimated start yet" not in html
    assert booking.end.isoformat() in html.split('data-testid="estimated-start"', 1)[1][:300]
    # Once the booking is over, the next cycle starts the job.
    dispatch.schedule_cycle(now=booking.end + timedelta(seconds=5))
    job.refresh_from_db()
    assert job.status == JobStatus.DISPATCHED and job.estimated_start is None
