from datetime import timedelta

import pytest
from django.core import mail

from apps.audit.models import AuditEvent
from apps.reservations.models import Reservation, ReservationGpu
from portal import hooks
from tests.conftest import client_for
from tests.reservations.conftest import booking

pytestmark = pytest.mark.django_db

URL = "/api/v1/reservations/"


def test_member_books_gpus_on_one_node_and_gets_them_back(member, quotas, tomorrow_9):
    response = client_for(member).post(
        URL, booking(count=4, start=tomorrow_9, purpose="ablation"), format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "scheduled" and body["count"] == 4 and body["over_quota"] is False
    assert len(body["gpus"]) == 4 and len({g["node"] for g in body["gpus"]}) == 1
    assert ReservationGpu.objects.filter(reservation_id=body["id"], active=True).count() == 4


def test_booking_above_guarantee_is_flagged_over_quota(member, quotas, tomorrow_9):
    body = client_for(member).post(URL, booking(count=6, start=tomorrow_9), format="json").json()
    assert body["over_quota"] is True


def test_full_fleet_answers_409_with_next_free_slot(member, outsider, quotas, tomorrow_9):
    assert (
        client_for(outsider).post(URL, booking("nlp", 16, tomorrow_9), format="json").status_code
        == 201
    )
    response = client_for(member).post(URL, booking(count=1, start=tomorrow_9), format="json")
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "conflict"
    assert body["detail"]["free_gpus"] == 0
    assert (
        body["detail"]["next_free_slot"]["start"] == (tomorrow_9 + timedelta(hours=2)).isoformat()
    )
    assert Reservation.objects.filter(team__slug="vision").count() == 0


def test_quota_limit_is_403_with_the_numbers(member, quotas, tomorrow_9):
    api = client_for(member)
    assert api.post(URL, booking(count=10, start=tomorrow_9), format="json").status_code == 201
    response = api.post(URL, booking(count=3, start=tomorrow_9 + timedelta(hours=1)), format="json")
    assert response.status_code == 403
    body = response.json()
    assert body["code"] == "quota_exceeded"
    assert {k: body["detail"][k] for k in ("limit", "booked", "requested", "available")} == {
        "limit": 12,
        "booked": 10,
        "requested": 3,
        "available": 2,
    }
    # after the first booking ends the quota is free again
    later = tomorrow_9 + timedelta(hours=2)
    assert api.post(URL, booking(count=3, start=later), format="json").status_code == 201


def test_team_without_quota_for_model_is_refused(member, fleet, tomorrow_9):
    response = client_for(member).post(URL, booking(count=1, start=tomorrow_9), format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "quota_exceeded"


def test_any_model_quota_caps_all_models_together(member, team, fleet, tomorrow_9):
    from apps.teams.models import Quota

    Quota.objects.create(team=team, gpu_model=None, guaranteed=0, limit=3)
    api = client_for(member)
    assert api.post(URL, booking(count=2, start=tomorrow_9), format="json").status_code == 201
    l40s = booking(count=2, start=tomorrow_9, gpu_model="L40S-48GB")
    response = api.post(URL, l40s, format="json")
    assert (
        response.status_code == 403 and response.json()["detail"]["gpu_model"] == "all GPU models"
    )


@pytest.fixture
def budget_refuses(settings):
    settings.PORTAL_HOOKS = {"reservations.budget_check": [f"{__name__}.refuse_budget"]}
    hooks.reset_cache()
    yield
    hooks.reset_cache()


def test_budget_refusal_is_403_and_writes_nothing(member, quotas, tomorrow_9, budget_refuses):
    response = client_for(member).post(URL, booking(count=1, start=tomorrow_9), format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "budget_exhausted"
    assert not Reservation.objects.exists() and not ReservationGpu.objects.exists()


def refuse_budget(**booking):
    from portal.exceptions import PolicyRefusal

    raise PolicyRefusal("Budget exhausted.", code="budget_exhausted", detail={"left": "0.00"})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"start": "2020-01-01T09:00:00Z", "end": "2020-01-01T10:00:00Z"}, "start"),
        ({"end": "__start__"}, "end"),
        ({"start": "2030-01-01T09:00:00Z", "end": "2030-01-01T10:00:00Z"}, "start"),
        ({"hours": 24 * 8}, "end"),
        ({"minutes_offset": 7}, "start"),
        ({"end_minutes": 50}, "end"),
        ({"count": 0}, "count"),
        ({"count": 10**12}, "count"),
        ({"count": "eight"}, "count"),
        ({"count": 65}, "count"),
        ({"count": 17}, "count"),
        ({"gpu_model": "Z9000"}, "gpu_model"),
        ({"team": "nlp"}, "team"),
        ({"team": "no-such-team"}, "team"),
        ({"start": "tomorrow at nine"}, "start"),
        ({"start": "2026-12-24T09:00:00"}, "start"),
        ({"duration": "PT2H"}, "end"),
    ],
)
def test_bad_booking_input_is_400_naming_the_field(
    member, outsider, quotas, tomorrow_9, settings, change, field
):
    settings.RESERVATION_MAX_GPUS = 64
    body = booking(count=2, start=tomorrow_9)
    change = dict(change)
    if change.pop("end", None) == "__start__":
        body["end"] = body["start"]
    if "hours" in change:
        body["end"] = (tomorrow_9 + timedelta(hours=change.pop("hours"))).isoformat()
    if "minutes_offset" in change:
        start = tomorrow_9 + timedelta(minutes=change.pop("minutes_offset"))
        body["start"], body["end"] = start.isoformat(), (start + timedelta(hours=1)).isoformat()
    if "end_minutes" in change:
        body["end"] = (tomorrow_9 + timedelta(minutes=change.pop("end_minutes"))).isoformat()
    body.update(change)
    response = client_for(member).post(URL, body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["detail"], response.json()
    assert not Reservation.objects.exists()


def test_other_teams_reservation_is_404(member, outsider, quotas, tomorrow_9):
    theirs = client_for(outsider).post(URL, booking("nlp", 2, tomorrow_9), format="json").json()
    api = client_for(member)
    assert api.get(f"{URL}{theirs['id']}/").status_code == 404
    assert api.post(f"{URL}{theirs['id']}/cancel/", {}, format="json").status_code == 404
    assert [r["id"] for r in api.get(URL).json()["results"]] == []


def test_cancel_before_start_frees_gpus_and_cancelling_again_is_409(member, quotas, tomorrow_9):
    api = client_for(member)
    rid = api.post(URL, booking(count=8, start=tomorrow_9), format="json").json()["id"]
    cancelled = api.post(f"{URL}{rid}/cancel/", {"reason": "plans changed"}, format="json")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert not ReservationGpu.objects.filter(reservation_id=rid, active=True).exists()
    again = api.post(f"{URL}{rid}/cancel/", {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "invalid_state"


def test_cancel_during_window_frees_the_rest(member, quotas, h100):
    from django.utils import timezone

    from apps.reservations.services import reservation_create

    start = timezone.now().replace(second=0, microsecond=0)
    start -= timedelta(minutes=start.minute % 15)
    reservation = reservation_create(
        team=quotas[0].team,
        user=member,
        gpu_model=h100,
        count=2,
        start=start,
        end=start + timedelta(hours=4),
    )
    assert reservation.status == "active"
    client_for(member).post(f"{URL}{reservation.pk}/cancel/", {}, format="json")
    holdings = ReservationGpu.objects.filter(reservation=reservation, active=True)
    assert holdings.count() == 2
    assert all(h.end <= timezone.now() for h in holdings)


def test_extend_keeps_same_gpus_and_refuses_when_taken(member, outsider, quotas, tomorrow_9):
    api = client_for(member)
    mine = api.post(URL, booking(count=8, start=tomorrow_9, same_node=True), format="json").json()
    extended = api.post(
        f"{URL}{mine['id']}/extend/",
        {"end": (tomorrow_9 + timedelta(hours=3)).isoformat()},
        format="json",
    )
    assert extended.status_code == 200
    assert extended.json()["end"].startswith(
        (tomorrow_9 + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M")
    )
    assert {g["uuid"] for g in extended.json()["gpus"]} == {g["uuid"] for g in mine["gpus"]}
    # nlp fills every H100 from 3h to 5h; extending vision to 4h must now conflict
    client_for(outsider).post(
        URL, booking("nlp", 16, tomorrow_9 + timedelta(hours=3), hours=2), format="json"
    )
    refused = api.post(
        f"{URL}{mine['id']}/extend/",
        {"end": (tomorrow_9 + timedelta(hours=4)).isoformat()},
        format="json",
    )
    assert refused.status_code == 409
    assert Reservation.objects.get(pk=mine["id"]).end == tomorrow_9 + timedelta(hours=3)


def test_other_member_cannot_cancel_but_team_admin_can(member, team_admin, quotas, tomorrow_9):
    from tests.factories import MembershipFactory, UserFactory

    colleague = MembershipFactory(team=quotas[0].team, user=UserFactory(username="carl")).user
    rid = (
        client_for(member).post(URL, booking(count=1, start=tomorrow_9), format="json").json()["id"]
    )
    refused = client_for(colleague).post(f"{URL}{rid}/cancel/", {}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "not_owner"
    assert client_for(team_admin).post(f"{URL}{rid}/cancel/", {}, format="json").status_code == 200


def test_platform_admin_force_cancel_is_audited_and_team_is_told(
    member, platform_admin, quotas, tomorrow_9, django_capture_on_commit_callbacks
):
    rid = (
        client_for(member).post(URL, booking(count=1, start=tomorrow_9), format="json").json()["id"]
    )
    api = client_for(platform_admin)
    no_reason = api.post(f"{URL}{rid}/cancel/", {}, format="json")
    assert no_reason.status_code == 400 and "reason" in no_reason.json()["detail"]
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            f"{URL}{rid}/cancel/", {"reason": "emergency maintenance"}, format="json"
        )
    assert response.status_code == 200
    assert len(mail.outbox) == 1 and member.email in mail.outbox[0].to
    assert "emergency maintenance" in mail.outbox[0].body
    event = AuditEvent.objects.get(action="reservation.force_cancel")
    assert event.actor == platform_admin and event.reason == "emergency maintenance"


def test_availability_lists_earliest_slots_and_rounds_duration(
    member, outsider, quotas, tomorrow_9
):
    client_for(outsider).post(URL, booking("nlp", 16, tomorrow_9, hours=2), format="json")
    response = client_for(member).get(
        "/api/v1/availability/",
        {
            "gpu_model": "H100-SXM-80GB",
            "count": 8,
            "duration": "01:10:00",
            "after": tomorrow_9.isoformat(),
            "same_node": "true",
        },
    )
    assert response.status_code == 200
    body = response.json()
    assert body["duration"] == "1:15:00"
    first = body["slots"][0]
    assert first["start"].startswith((tomorrow_9 + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"))
    assert len(first["gpus"]) == 8 and len({g["node"] for g in first["gpus"]}) == 1


def test_availability_bad_input_is_400(member, fleet):
    api = client_for(member)
    assert "gpu_model" in api.get("/api/v1/availability/", {"gpu_model": "nope"}).json()["detail"]
    assert (
        "count"
        in api.get("/api/v1/availability/", {"gpu_model": "H100-SXM-80GB", "count": "many"}).json()[
            "detail"
        ]
    )


def test_timeline_counts_free_gpus_per_bucket(member, outsider, quotas, tomorrow_9):
    client_for(outsider).post(URL, booking("nlp", 10, tomorrow_9, hours=1), format="json")
    response = client_for(member).get(
        "/api/v1/availability/timeline/",
        {
            "gpu_model": "H100-SXM-80GB",
            "start": tomorrow_9.isoformat(),
            "end": (tomorrow_9 + timedelta(hours=2)).isoformat(),
            "bucket": "01:00:00",
        },
    )
    assert [p["free"] for p in response.json()["points"]] == [6, 16]
