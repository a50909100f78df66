"""The jobs API: submit, list/filter, detail, cancel, log; bad input and other teams."""

import pytest

from apps.jobs import services
from apps.jobs.choices import JobStatus
from apps.jobs.dispatch import schedule_cycle
from apps.jobs.models import Job
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


def body(**kwargs):
    data = {
        "team": "vision",
        "name": "resnet",
        "argv": ["python", "train.py", "--epochs", "3"],
        "env": {"SEED": "1"},
        "gpu_model": "H100-SXM-80GB",
        "gpu_count": 2,
        "max_runtime_seconds": 3600,
    }
    data.update(kwargs)
    return data


def test_submit_detail_and_log(member, fleet, quotas, sent):
    client = client_for(member)
    response = client.post(URL, body(), format="json")
    assert response.status_code == 201, response.json()
    job = response.json()
    assert job["status"] == "queued" and job["argv"][1] == "train.py"
    assert job["pending_message"] and job["allocations"] == []
    schedule_cycle()
    detail = client.get(f"{URL}{job['id']}/").json()
    assert detail["status"] == "dispatched" and len(detail["allocations"]) == 2
    assert {"pending_reason", "estimated_start", "node"} <= set(detail)
    Job.objects.filter(pk=job["id"]).update(log_tail="epoch 1\n")
    log = client.get(f"{URL}{job['id']}/log/").json()
    assert log["log_tail"] == "epoch 1\n"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"argv": "python train.py"}, "argv"),
        ({"argv": []}, "argv"),
        ({"env": {"not-valid": "x"}}, "env"),
        ({"gpu_model": "TPU-v9"}, "gpu_model"),
        ({"gpu_count": 17}, "gpu_count"),  # more than the fleet, even across nodes
        ({"gpu_count": 17, "same_node": False}, "gpu_count"),
        ({"gpu_count": 0}, "gpu_count"),
        ({"max_runtime_seconds": 30 * 24 * 3600}, "max_runtime_seconds"),
        ({"team": "nlp"}, "team"),  # not the caller's team: does not exist for them
        ({"priority_class": "vip"}, "priority_class"),
    ],
)
def test_submit_bad_input_is_400_with_field(member, fleet, outsider, sent, change, field):
    response = client_for(member).post(URL, body(**change), format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["detail"]
    assert not Job.objects.exists()


def test_other_teams_jobs_are_404_and_not_listed(member, outsider, team, fleet, sent):
    job = services.job_submit(
        actor=member, team=team, argv=["true"], gpu_count=1, max_runtime_seconds=60
    )
    client = client_for(outsider)
    assert client.get(f"{URL}{job.pk}/").status_code == 404
    assert client.post(f"{URL}{job.pk}/cancel/").status_code == 404
    assert client.get(f"{URL}{job.pk}/log/").status_code == 404
    assert client.get(URL).json()["results"] == []


def test_unauthenticated_is_refused(api_client):
    assert api_client.get(URL).status_code in (401, 403)


def test_list_filters(member, team, fleet, sent, h100):
    for count in (1, 2):
        services.job_submit(
            actor=member,
            team=team,
            argv=["true"],
            gpu_model=h100,
            gpu_count=count,
            max_runtime_seconds=60,
        )
    done = services.job_submit(
        actor=member, team=team, argv=["true"], gpu_count=1, max_runtime_seconds=60
    )
    Job.objects.filter(pk=done.pk).update(status=JobStatus.SUCCEEDED)
    client = client_for(member)
    assert len(client.get(URL, {"status": "queued"}).json()["results"]) == 2
    assert len(client.get(URL, {"gpu_model": "H100-SXM-80GB"}).json()["results"]) == 2
    assert len(client.get(URL, {"submitted_by": "alice", "team": "vision"}).json()["results"]) == 3
    assert client.get(URL, {"status": "bogus"}).status_code == 400


def test_cancel_then_cancel_again_is_409(member, team, fleet, sent):
    job = services.job_submit(
        actor=member, team=team, argv=["true"], gpu_count=1, max_runtime_seconds=60
    )
    client = client_for(member)
    response = client.post(f"{URL}{job.pk}/cancel/", {"reason": "typo"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    again = client.post(f"{URL}{job.pk}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "job_finished"
