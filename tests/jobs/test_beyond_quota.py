"""A job larger than its team may ever get: a Guaranteed job above the guarantee is refused at
submit with the fix, and a job above the limit waits for the quota with no start estimate."""

import pytest
from django.core.exceptions import ValidationError

from apps.jobs import dispatch, services
from apps.jobs.choices import JobPriorityClass
from apps.jobs.models import Job
from apps.jobs.scheduler import schedule
from apps.jobs.scheduler.state import ClusterState, PendingReason, PriorityClass
from apps.reservations.services import reservation_create
from apps.teams.models import Quota
from tests.conftest import client_for
from tests.jobs.test_scheduler import H100, NOW, fleet, job, pending, running

GUARANTEE_4 = [("vision", H100, 4, 12)]


def _rows(rows):
    from apps.jobs.scheduler.state import TeamQuota

    return [TeamQuota(*row) for row in rows]


# --- the scheduler's answer --------------------------------------------------------------------


def test_guaranteed_job_above_the_guarantee_waits_for_the_guarantee_without_estimate():
    """The walkthrough's case: 6 GPUs as Guaranteed, 4 guaranteed, nothing held, 16 free."""
    state = ClusterState(
        NOW,
        fleet(2, 8),
        [job(1, count=6, priority_class=PriorityClass.GUARANTEED)],
        quotas=_rows(GUARANTEE_4),
    )
    waiting = pending(schedule(state))[1]
    assert waiting.reason == PendingReason.BEYOND_QUOTA
    assert waiting.estimated_start is None
    assert waiting.message == (
        f"The job needs 6 GPUs but team vision is guaranteed 4 {H100} GPUs: as Guaranteed it "
        "cannot start until the guarantee changes. Submit it as Over quota to run on spare GPUs."
    )
    assert "using all" not in waiting.message


def test_job_above_the_limit_cannot_start_until_the_limit_changes():
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=14)], quotas=_rows(GUARANTEE_4))
    waiting = pending(schedule(state))[1]
    assert waiting.reason == PendingReason.BEYOND_QUOTA
    assert waiting.estimated_start is None
    assert waiting.message == (
        f"The job needs 14 GPUs, more than team vision's limit of 12 {H100} GPUs: it cannot "
        "start until a platform admin raises the limit."
    )


def test_any_model_row_is_the_limit_named():
    rows = _rows([("vision", H100, 4, 12), ("vision", None, 0, 6)])
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=8)], quotas=rows)
    waiting = pending(schedule(state))[1]
    assert waiting.reason == PendingReason.BEYOND_QUOTA
    assert "limit of 6 GPUs of any model" in waiting.message


def test_guaranteed_job_within_the_guarantee_says_what_the_team_holds():
    """2 of 4 guaranteed held; 3 more do not fit the guarantee now, but will: the message gives
    the numbers (not "using all 4") and the job keeps its estimate."""
    state = ClusterState(
        NOW,
        fleet(1, 8),
        [job(1, count=3, priority_class=PriorityClass.GUARANTEED)],
        [running(9, "vision", [0, 1], over=False)],
        quotas=_rows(GUARANTEE_4),
    )
    waiting = pending(schedule(state))[1]
    assert waiting.reason == PendingReason.QUOTA_REACHED
    assert waiting.message == (
        f"Team vision holds 2 of the 4 {H100} GPUs it is guaranteed; the job needs 3."
    )


def _in_research(unit_limit: int) -> dict:
    """vision (4 / 12 of H100) in unit Research, whose H100 row caps its teams at
    ``unit_limit`` together."""
    from apps.teams.org_tree import OrgTree
    from apps.teams.quota_rule import UnitQuotaRow

    return {
        "quotas": _rows(GUARANTEE_4),
        "unit_quotas": [UnitQuotaRow("research", H100, 4, unit_limit)],
        "org_tree": OrgTree(
            {"org": None, "research": "org"}, {"vision": "research"}, {"research": "Research"}
        ),
    }


def test_a_units_tighter_limit_is_the_limit_named():
    """Research caps its teams at 8 H100s, below vision's own limit of 12: a 10-GPU job waits
    for the unit's limit, and the message says so (not "team vision's limit of 12")."""
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=10)], **_in_research(8))
    waiting = pending(schedule(state))[1]
    assert waiting.reason == PendingReason.BEYOND_QUOTA
    assert waiting.estimated_start is None
    assert waiting.message == (
        f"The job needs 10 GPUs, more than unit Research's limit of 8 {H100} GPUs for all its "
        "teams together: it cannot start until the unit's limit is raised."
    )
    # With the unit's limit above the team's, the team's binds.
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=14)], **_in_research(16))
    assert "more than team vision's limit of 12" in pending(schedule(state))[1].message
    # Within the unit's limit the job starts.
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=6)], **_in_research(8))
    assert [p.job_id for p in schedule(state).placements] == [1]


def test_job_within_the_limit_still_gets_an_estimate():
    state = ClusterState(
        NOW,
        fleet(1, 8),
        [job(1, count=4)],
        [running(9, "nlp", range(8), runtime=3600.0)],
        quotas=_rows([*GUARANTEE_4, ("nlp", H100, 8, 8)]),
    )
    waiting = pending(schedule(state))[1]
    assert waiting.reason != PendingReason.BEYOND_QUOTA
    assert waiting.estimated_start is not None


# --- submit ------------------------------------------------------------------------------------


def _submit(member, team, model, count, priority_class=JobPriorityClass.GUARANTEED, **kw):
    return services.job_submit(
        actor=member,
        team=team,
        argv=["python", "train.py"],
        gpu_model=model,
        gpu_count=count,
        max_runtime_seconds=3600,
        same_node=False,
        priority_class=priority_class,
        **kw,
    )


@pytest.mark.django_db
def test_guaranteed_job_above_the_guarantee_is_refused_with_the_fix(member, team, quotas, h100):
    with pytest.raises(ValidationError) as refusal:
        _submit(member, team, h100, 6)
    assert refusal.value.message_dict == {
        "priority_class": [
            f"Team vision is guaranteed 4 {h100.name} GPUs, so a 6-GPU job cannot run as "
            "Guaranteed. Choose Over quota to run it on spare GPUs within the team's limit (it "
            "may be preempted), or ask for at most 4 GPUs."
        ]
    }
    assert not Job.objects.exists()
    # The fix works: the same job as Over quota, and 4 GPUs as Guaranteed, are queued.
    assert _submit(member, team, h100, 6, JobPriorityClass.OVER_QUOTA).pk
    assert _submit(member, team, h100, 4).pk


@pytest.mark.django_db
def test_team_without_a_guarantee_is_told_to_use_over_quota(member, team, h100):
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=0, limit=8)
    with pytest.raises(ValidationError) as refusal:
        _submit(member, team, h100, 1)
    (message,) = refusal.value.message_dict["priority_class"]
    assert message.startswith(f"Team vision has no guaranteed {h100.name} GPUs")
    assert "Choose Over quota" in message


@pytest.mark.django_db
def test_any_model_job_is_bounded_by_the_largest_guarantee(member, team, quotas, fleet):
    with pytest.raises(ValidationError) as refusal:
        _submit(member, team, None, 5)
    assert "guaranteed 4 GPUs of one model, so a 5-GPU job" in str(refusal.value)
    assert _submit(member, team, None, 4).pk


@pytest.mark.django_db
def test_guaranteed_job_inside_a_booking_is_bounded_by_the_booking(
    member, team, quotas, h100, tomorrow_9
):
    from datetime import timedelta

    booking = reservation_create(
        team=team, user=member, gpu_model=h100, count=8, start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=2),
    )  # fmt: skip
    assert _submit(member, team, None, 6, reservation=booking).pk


@pytest.mark.django_db
def test_api_refuses_with_a_400_on_priority_class(member, quotas, h100):
    response = client_for(member).post(
        "/api/v1/jobs/",
        {
            "team": "vision",
            "argv": ["python", "train.py"],
            "gpu_model": h100.name,
            "gpu_count": 6,
            "max_runtime_seconds": 3600,
            "priority_class": "guaranteed",
        },
        format="json",
    )
    assert response.status_code == 400
    assert "cannot run as Guaranteed" in response.json()["detail"]["priority_class"][0]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_form_shows_the_refusal_under_the_priority_class(client, member, quotas, h100):
    client.force_login(member)
    html = client.post(
        "/jobs/submit/",
        {
            "team": "vision",
            "argv": "python",
            "gpu_model": h100.name,
            "gpu_count": 6,
            "max_runtime_minutes": 30,
            "priority_class": "guaranteed",
        },
    ).text
    assert 'id="id_priority_class-error"' in html
    assert "Choose Over quota" in html.split('id="id_priority_class-error"', 1)[1]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_job_above_the_limit_has_no_estimate_on_its_page(client, member, team, quotas, h100, sent):
    queued = _submit(member, team, h100, 14, JobPriorityClass.OVER_QUOTA)
    dispatch.schedule_cycle()
    queued.refresh_from_db()
    assert queued.pending_reason == "beyond_quota" and queued.estimated_start is None
    client.force_login(member)
    html = client.get(f"/jobs/{queued.pk}/").text
    assert "cannot start until a platform admin raises the limit" in html
    assert "No estimated start: the job waits until the limit named above is raised." in html


@pytest.mark.django_db
def test_job_above_its_units_limit_names_the_unit_on_its_page(
    client, member, team, quotas, h100, platform_admin, sent
):
    from apps.teams.models import ROOT_UNIT_SLUG, OrgUnit, Team
    from apps.teams.services import unit_create, unit_quota_set

    root = OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)
    research = unit_create(slug="research", name="Research", parent=root, actor=platform_admin)
    Team.objects.filter(pk=team.pk).update(unit=research)
    unit_quota_set(unit=research, gpu_model=h100, guaranteed=4, limit=8, actor=platform_admin)
    queued = _submit(member, team, h100, 10, JobPriorityClass.OVER_QUOTA)
    dispatch.schedule_cycle()
    queued.refresh_from_db()
    assert queued.pending_reason == "beyond_quota" and queued.estimated_start is None
    assert queued.pending_message == (
        f"The job needs 10 GPUs, more than unit Research's limit of 8 {h100.name} GPUs for all "
        "its teams together: it cannot start until the unit's limit is raised."
    )
    client.force_login(member)
    html = client.get(f"/jobs/{queued.pk}/").text
    assert "unit Research&#x27;s limit of 8" in html
    assert "team vision&#x27;s limit" not in html
    assert "No estimated start: the job waits until the limit named above is raised." in html
