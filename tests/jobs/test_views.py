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
