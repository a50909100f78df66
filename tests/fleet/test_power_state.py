"""Node power state: the transitions, who may ask, what powered-down capacity offers, the
history metering reads, and a node that does not come back."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.fleet.choices import NodeStatus, PowerState
from apps.fleet.models import Gpu, Node, NodePowerEvent
from apps.fleet.selectors import powered_off_intervals
from apps.fleet.services import node_power_observed, node_power_request
from apps.jobs.choices import JobStatus
from apps.jobs.models import Job, JobAllocation
from apps.reservations import selectors as reservation_selectors
from apps.reservations.models import ReservationGpu
from apps.telemetry.services import nodes_mark_unreachable
from portal import hooks
from portal.exceptions import ConflictError, PolicyRefusal
from tests.conftest import client_for
from tests.factories import JobFactory, make_booking

pytestmark = pytest.mark.django_db

LEAD = timedelta(seconds=300 + 600)  # the default resume time plus the default booking margin


@pytest.fixture
def requested(monkeypatch):
    """What the fleet asked the power app to do (`node.power_requested`), in order."""
    asked: list[tuple[str, str]] = []
    monkeypatch.setattr(
        hooks,
        "subscribers",
        lambda event, original=hooks.subscribers: (
            [lambda node, operation: asked.append((node.hostname, operation))]
            if event == "node.power_requested"
            else original(event)
        ),
    )
    return asked


def _power_off(node, actor=None):
    node_power_request(node=node, operation="power_off", actor=actor, reason="idle")
    node_power_observed(node=node, operation="suspended", reason="driver reports off")
    return Node.objects.get(pk=node.pk)


def test_admin_powers_a_node_off_through_the_api_recorded_audited_and_driver_asked(
    platform_admin, fleet, requested
):
    node = fleet[0]
    response = client_for(platform_admin).post(
        f"/api/v1/nodes/{node.pk}/power-off/", {"reason": "weekend"}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["power_state"], body["power_state_by"]) == ("suspending", platform_admin.username)
    assert requested == [("h100-a", "power_off")]
    event = NodePowerEvent.objects.get(node=node)
    assert (event.from_state, event.to_state, event.by, event.reason) == (
        "on",
        "suspending",
        platform_admin.username,
        "weekend",
    )
    audit = AuditEvent.objects.get(action="node.power_off")
    assert audit.actor == platform_admin
    assert audit.before == {"power_state": "on"} and audit.after == {"power_state": "suspending"}


@pytest.mark.parametrize("user_fixture", ["member", "team_admin", "finance_user"])
def test_only_platform_admins_power_nodes(request, user_fixture, fleet, requested):
    user = request.getfixturevalue(user_fixture)
    api = client_for(user)
    node = fleet[0]
    assert api.post(f"/api/v1/nodes/{node.pk}/power-off/", format="json").status_code == 403
    assert api.post(f"/api/v1/nodes/{node.pk}/power-on/", format="json").status_code == 403
    assert Node.objects.get(pk=node.pk).power_state == PowerState.ON
    assert not NodePowerEvent.objects.exists() and requested == []
    with pytest.raises(PolicyRefusal):
        node_power_request(node=node, operation="power_off", actor=user)


def test_powering_on_a_node_that_is_on_is_409_and_changes_nothing(platform_admin, fleet):
    response = client_for(platform_admin).post(
        f"/api/v1/nodes/{fleet[0].pk}/power-on/", format="json"
    )
    assert response.status_code == 409
    assert response.json()["code"] == "invalid_power_state"
    assert "its power is on" in response.json()["message"]
    assert not NodePowerEvent.objects.exists()
    assert not AuditEvent.objects.exists()


def test_a_retired_node_is_not_powered(platform_admin, fleet):
    Node.objects.filter(pk=fleet[2].pk).update(status=NodeStatus.RETIRED)
    with pytest.raises(ConflictError) as refused:
        node_power_request(node=fleet[2], operation="power_off", actor=platform_admin)
    assert refused.value.code == "invalid_state"


def test_admin_cannot_power_off_a_node_with_a_booking_before_it_could_be_back(
    platform_admin, fleet, team, member
):
    now = timezone.now()
    gpu = fleet[0].gpus.first()
    booking = make_booking(team, member, [gpu], now + LEAD - timedelta(minutes=1), now + LEAD * 3)
    response = client_for(platform_admin).post(
        f"/api/v1/nodes/{fleet[0].pk}/power-off/", format="json"
    )
    assert response.status_code == 409
    assert response.json()["code"] == "node_busy"
    assert f"booking #{booking.pk}" in response.json()["message"]
    # A booking that starts after the node could be back does not stop it.
    node_power_request(node=fleet[1], operation="power_off", actor=platform_admin)
    make_booking(team, member, [fleet[1].gpus.first()], now + LEAD * 2, now + LEAD * 3)


def test_admin_cannot_power_off_a_node_running_a_job(platform_admin, fleet, team):
    now = timezone.now()
    job = JobFactory(team=team, status=JobStatus.RUNNING, started_at=now)
    JobAllocation.objects.create(job=job, gpu=fleet[0].gpus.first(), start=now)
    with pytest.raises(ConflictError) as refused:
        node_power_request(node=fleet[0], operation="power_off", actor=platform_admin)
    assert refused.value.code == "node_busy"
    assert "running jobs" in refused.value.message
    assert Node.objects.get(pk=fleet[0].pk).power_state == PowerState.ON


def test_full_cycle_follows_the_table_and_names_who_asked(platform_admin, fleet):
    node = _power_off(fleet[0])
    assert (node.power_state, node.power_state_by) == (PowerState.OFF, "power driver")
    node_power_request(node=node, operation="power_on", actor=platform_admin)
    assert Node.objects.get(pk=node.pk).power_state == PowerState.RESUMING
    # An observation that does not fit the state is not recorded.
    assert not node_power_observed(node=node, operation="suspended", reason="late report")
    assert node_power_observed(node=node, operation="resumed", reason="driver reports on")
    states = list(NodePowerEvent.objects.values_list("to_state", "by"))
    assert states == [
        ("suspending", "power policy"),
        ("off", "power driver"),
        ("resuming", platform_admin.username),
        ("on", "power driver"),
    ]


def test_powered_down_gpus_are_not_schedulable_now_but_may_take_work_after_the_lead(fleet):
    before = Gpu.objects.schedulable().count()
    _power_off(fleet[0])
    now = timezone.now()
    assert Gpu.objects.schedulable().count() == before - 8
    assert Gpu.objects.in_service().count() == before
    assert Gpu.objects.schedulable(at=now + LEAD - timedelta(minutes=1)).count() == before - 8
    assert Gpu.objects.schedulable(at=now + LEAD + timedelta(minutes=1)).count() == before
    with override_settings(POWER_RESUME_SECONDS=3600):
        assert Gpu.objects.schedulable(at=now + LEAD + timedelta(minutes=1)).count() == before - 8
    # Per node: the label wins over the setting.
    Node.objects.filter(pk=fleet[0].pk).update(labels={"power_resume_seconds": "30"})
    assert Gpu.objects.schedulable(at=now + timedelta(seconds=30 + 600 + 5)).count() == before


def test_a_node_that_failed_to_resume_offers_nothing_at_any_time(fleet):
    node = _power_off(fleet[0])
    node_power_request(node=node, operation="power_on", actor=None)
    node_power_observed(node=node, operation="resume_failed", reason="not on after 15 min")
    later = timezone.now() + timedelta(days=1)
    assert not Gpu.objects.schedulable(at=later).filter(node=node).exists()


def test_booking_search_offers_a_powered_down_node_only_after_it_could_be_back(fleet):
    h100 = fleet[0].gpus.first().model
    _power_off(fleet[0])
    _power_off(fleet[1])
    now = timezone.now()
    assert reservation_selectors.schedulable_gpus(gpu_model=h100) == []
    later = reservation_selectors.schedulable_gpus(
        gpu_model=h100, free_from=now + LEAD * 2, free_until=now + LEAD * 3
    )
    assert len(later) == 16
    slots = reservation_selectors.slots_from_now(
        gpu_model=h100, count=1, duration=timedelta(hours=1)
    )
    assert slots and slots[0].start >= now + LEAD


def test_resume_failed_moves_bookings_and_requeues_jobs(fleet, team, member):
    now = timezone.now()
    node = _power_off(fleet[0])
    start = now.replace(second=0, microsecond=0) + timedelta(hours=1)
    booking = make_booking(team, member, list(node.gpus.all()[:2]), start, start + LEAD)
    # a job a stale dispatch left there
    job = JobFactory(team=team, status=JobStatus.RUNNING, started_at=now)
    JobAllocation.objects.create(job=job, gpu=node.gpus.last(), start=now)
    node_power_request(node=node, operation="power_on", actor=None, by="power policy")
    assert node_power_observed(node=node, operation="resume_failed", reason="not on in time")
    holdings = ReservationGpu.objects.filter(reservation=booking, active=True)
    assert {h.gpu.node.hostname for h in holdings} == {"h100-b"}
    assert {h.change_reason for h in holdings} == {"node h100-a did not power back on"}
    assert Job.objects.get(pk=job.pk).status == JobStatus.REQUEUED
    audit = AuditEvent.objects.get(action="node.resume_failed")
    assert audit.actor is None and audit.after == {"power_state": "resume_failed"}


def test_health_check_leaves_powered_down_and_just_woken_nodes_alone(fleet):
    from apps.telemetry.models import DrainHeartbeat

    now = timezone.now()
    DrainHeartbeat.objects.create(
        pk=1, last_run_at=now, listening_since=now - timedelta(hours=1), backlog=False
    )
    Node.objects.update(
        last_seen=now - timedelta(hours=1), power_state_since=now - timedelta(days=1)
    )
    _power_off(fleet[0])
    node_power_request(node=fleet[1], operation="power_off", actor=None)
    node_power_observed(node=fleet[1], operation="suspended", reason="off")
    node_power_request(node=fleet[1], operation="power_on", actor=None)
    node_power_observed(node=fleet[1], operation="resumed", reason="on")
    assert nodes_mark_unreachable(now=now) == ["l40s-a"]


def test_powered_off_intervals_are_clipped_and_join_the_four_down_states(fleet):
    node, other = fleet[0], fleet[1]
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=10)

    def event(n, hours, from_state, to_state):
        NodePowerEvent.objects.create(
            node=n, at=t0 + timedelta(hours=hours), from_state=from_state, to_state=to_state
        )

    event(node, 0, "on", "suspending")
    event(node, 0.1, "suspending", "off")
    event(node, 3, "off", "resuming")
    event(node, 3.1, "resuming", "on")
    event(node, 5, "on", "suspending")
    event(node, 5.1, "suspending", "off")
    event(node, 6, "off", "resuming")
    event(node, 6.5, "resuming", "resume_failed")
    event(other, 2, "on", "suspending")
    event(other, 2.5, "suspending", "on")  # the driver could not power it off
    intervals = powered_off_intervals(t0 + timedelta(hours=1), t0 + timedelta(hours=8))
    hours = [
        (i.node_id, (i.start - t0) / timedelta(hours=1), (i.end - t0) / timedelta(hours=1))
        for i in intervals
    ]
    assert hours == [(node.pk, 1, 3.1), (node.pk, 5, 8), (other.pk, 2, 2.5)]
    assert powered_off_intervals(t0 + timedelta(hours=4), t0 + timedelta(hours=4.5)) == []


def test_fleet_page_shows_power_state_and_offers_admins_the_button(
    client, platform_admin, member, fleet
):
    _power_off(fleet[0])
    client.force_login(platform_admin)
    page = client.get("/fleet/").content.decode()
    assert 'Power: <span class="pill power-off">Off</span>' in page
    assert "(power driver)" in page
    assert "Power on node h100-a" in page and "Power off node h100-b" in page
    response = client.post(f"/fleet/nodes/{fleet[0].pk}/power/power_on/", follow=True)
    assert "h100-a: power on requested." in response.content.decode()
    assert Node.objects.get(pk=fleet[0].pk).power_state == PowerState.RESUMING
    client.force_login(member)
    assert "Power off node" not in client.get("/fleet/").content.decode()
    assert client.post(f"/fleet/nodes/{fleet[1].pk}/power/power_off/").status_code == 403
    assert Node.objects.get(pk=fleet[1].pk).power_state == PowerState.ON


def test_fleet_page_power_button_on_an_invalid_state_says_why(client, platform_admin, fleet):
    client.force_login(platform_admin)
    response = client.post(f"/fleet/nodes/{fleet[0].pk}/power/power_on/", follow=True)
    assert "Cannot power on h100-a: its power is on." in response.content.decode()
    assert client.post(f"/fleet/nodes/{fleet[0].pk}/power/explode/").status_code == 404


@override_settings(METRICS_TOKEN="scrape-token-for-tests")
def test_summary_page_and_metrics_count_powered_down_capacity(client, platform_admin, fleet):
    _power_off(fleet[0])
    client.force_login(platform_admin)
    page = client.get("/fleet/").content.decode()
    assert "<strong>8</strong> powered down to save energy" in page
    assert "<strong>12</strong> schedulable GPUs" in page
    metrics = client.get(
        "/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-for-tests"
    ).content.decode()
    assert 'portal_nodes_power{power_state="off"} 1.0' in metrics
    assert 'portal_nodes_power{power_state="on"} 2.0' in metrics
