"""The live queue page and its API: per GPU model, waiting jobs in the scheduler's order with
reason and estimate; per team, guaranteed / used / borrowed GPUs now."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from apps.jobs import dispatch
from apps.jobs.models import Job
from tests.conftest import client_for
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def waiting(member, outsider, team, other_team, h100, quotas):
    """Three 8-GPU H100 jobs of vision (limit 12: one at a time) submitted out of id order,
    with different runtimes, and one L40S job of nlp."""
    now = timezone.now()
    jobs = {}
    for name, minutes_ago, runtime in (("late", 5, 7200), ("early", 20, 14400), ("mid", 10, 600)):
        job = JobFactory(
            team=team, submitted_by=member, name=name, gpu_model=h100, gpu_count=8,
            max_runtime_seconds=runtime,
        )  # fmt: skip
        Job.objects.filter(pk=job.pk).update(submitted_at=now - timedelta(minutes=minutes_ago))
        jobs[name] = job
    jobs["secret"] = JobFactory(
        team=other_team, submitted_by=outsider, name="secret-run", gpu_count=2,
        gpu_model=h100.__class__.objects.get(name="L40S-48GB"),
    )  # fmt: skip
    return jobs


def _order(client, model="H100-SXM-80GB"):
    body = client.get("/api/v1/queue/").json()
    group = next(g for g in body["models"] if g["gpu_model"] == model)
    return [(entry["position"], entry["id"]) for entry in group["jobs"]]


def test_queue_order_is_the_order_the_scheduler_starts_jobs_in(member, waiting, sent):
    client = client_for(member)
    first, second, third = waiting["early"], waiting["mid"], waiting["late"]
    assert _order(client) == [(1, first.pk), (2, second.pk), (3, third.pk)]
    # vision may hold 12 H100: of three 8-GPU jobs the scheduler starts exactly one, the first.
    assert dispatch.schedule_cycle().placed == [first.pk]
    assert _order(client) == [(1, second.pk), (2, third.pk)]


@override_settings(JOBS_SCHEDULER_POLICY="sjf")
def test_under_shortest_job_first_the_queue_lists_shortest_first(member, waiting, sent):
    client = client_for(member)
    assert [job_id for _, job_id in _order(client)] == [
        waiting["mid"].pk,
        waiting["late"].pk,
        waiting["early"].pk,
    ]
    assert dispatch.schedule_cycle().placed == [waiting["mid"].pk]


def test_reason_estimate_and_team_holdings_after_a_cycle(client, member, waiting, sent):
    dispatch.schedule_cycle()
    client.force_login(member)
    page = client.get("/jobs/queue/").content.decode()
    assert "Team at its quota limit" in page  # the two H100 jobs left wait for vision's limit
    mid = Job.objects.get(pk=waiting["mid"].pk)
    assert mid.pending_reason == "quota_reached" and mid.pending_message in page
    # vision: 4 guaranteed, 8 running now, so 4 borrowed.
    row = client_for(member).get("/api/v1/queue/").json()["teams"]
    vision = next(r for r in row if r["team"] == "vision")
    assert (vision["guaranteed"], vision["used"], vision["borrowed"]) == (4, 8, 4)
    nlp = next(r for r in row if r["team"] == "nlp")
    assert (nlp["guaranteed"], nlp["used"], nlp["borrowed"]) == (8, 0, 0)


def test_other_teams_job_names_stay_hidden(client, outsider, member, waiting, sent):
    dispatch.schedule_cycle()
    client.force_login(member)
    page = client.get("/jobs/queue/").content.decode()
    secret = waiting["secret"]
    assert f'<tr data-job="{secret.pk}">' in page
    assert "secret-run" not in page and "another team's job" in page
    assert f'href="/jobs/{waiting["mid"].pk}/"' in page
    body = client_for(member).get("/api/v1/queue/").json()
    l40s = next(g for g in body["models"] if g["gpu_model"] == "L40S-48GB")
    assert l40s["jobs"][0]["name"] is None and l40s["jobs"][0]["pending_message"] == ""
    # Its own team sees it.
    body = client_for(outsider).get("/api/v1/queue/").json()
    l40s = next(g for g in body["models"] if g["gpu_model"] == "L40S-48GB")
    assert l40s["jobs"][0]["name"] == "secret-run"


def test_live_part_is_the_body_only_and_the_page_polls_it(client, member, waiting):
    client.force_login(member)
    page = client.get("/jobs/queue/").content.decode()
    assert 'data-live-url="/jobs/queue/?part=body"' in page and "js/live.js" in page
    part = client.get("/jobs/queue/?part=body").content.decode()
    assert "<html" not in part and f'data-job="{waiting["early"].pk}"' in part


def test_queue_needs_sign_in(client, api_client):
    assert client.get("/jobs/queue/").status_code == 302
    assert api_client.get("/api/v1/queue/").status_code == 401


def test_queue_is_in_the_openapi_schema(client, member):
    client.force_login(member)
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "/api/v1/queue/" in schema and "borrowed" in schema


def test_empty_queue_says_so(client, member):
    client.force_login(member)
    assert "No job is waiting." in client.get("/jobs/queue/").content.decode()


def test_a_teammates_job_takes_its_turn_ahead_of_one_users_backlog(member, team, waiting, sent):
    """Per-user fair share inside a team: the page lists jobs by their turn, as the cycle does."""
    from apps.jobs.scheduler.config import queue_order_key
    from tests.factories import MembershipFactory, UserFactory

    teammate = MembershipFactory(team=team, user=UserFactory(username="tom")).user
    theirs = JobFactory(
        team=team, submitted_by=teammate, name="tom-1", gpu_model=waiting["early"].gpu_model,
        gpu_count=8,
    )  # fmt: skip
    state = dispatch.build_state(now=timezone.now())
    expected = [
        q.job_id
        for q in sorted(state.queued, key=queue_order_key("fairshare"))
        if q.gpu_model == "H100-SXM-80GB"
    ]
    listed = [job_id for _, job_id in _order(client_for(member))]
    assert listed == expected
    # Submitted last, but alice's earlier jobs pushed her later turns back.
    assert listed.index(theirs.pk) < listed.index(waiting["late"].pk)


def test_every_pending_reason_has_a_short_label():
    from apps.jobs.scheduler.state import PendingReason
    from apps.jobs.selectors import PENDING_REASON_LABELS

    assert set(PENDING_REASON_LABELS) == set(PendingReason)
