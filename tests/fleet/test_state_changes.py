import pytest

from apps.audit.models import AuditEvent
from apps.fleet.choices import GpuStatus, NodeStatus
from apps.fleet.models import Gpu, Node
from apps.fleet.services import gpu_change_state, node_change_state
from portal.exceptions import ConflictError, PolicyRefusal
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def test_platform_admin_drains_node_and_event_records_before_after(platform_admin, fleet):
    node = fleet[0]
    response = client_for(platform_admin).post(
        f"/api/v1/nodes/{node.pk}/drain/", {"reason": "firmware update"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["status"] == "drained"
    event = AuditEvent.objects.get(action="node.drain")
    assert (event.actor, event.object_id, event.reason) == (
        platform_admin,
        str(node.pk),
        "firmware update",
    )
    assert event.before == {"status": "up"} and event.after == {"status": "drained"}


@pytest.mark.parametrize("user_fixture", ["member", "team_admin", "finance_user"])
def test_only_platform_admin_can_drain_a_node(request, user_fixture, fleet):
    user = request.getfixturevalue(user_fixture)
    node = fleet[0]
    response = client_for(user).post(f"/api/v1/nodes/{node.pk}/drain/", {}, format="json")
    assert response.status_code == 403
    node.refresh_from_db()
    assert node.status == NodeStatus.UP
    assert not AuditEvent.objects.exists()


def test_service_refuses_non_admin_even_if_called_directly(member, fleet):
    with pytest.raises(PolicyRefusal):
        node_change_state(node=fleet[0], operation="drain", actor=member)


def test_drained_nodes_gpus_leave_the_schedulable_pool_and_return(platform_admin, fleet):
    before = Gpu.objects.schedulable().count()
    node_change_state(node=fleet[0], operation="drain", actor=platform_admin)
    assert Gpu.objects.schedulable().count() == before - 8
    node_change_state(node=fleet[0], operation="undrain", actor=platform_admin)
    assert Gpu.objects.schedulable().count() == before


def test_retiring_a_node_retires_its_gpus_each_audited(platform_admin, fleet):
    node_change_state(node=fleet[2], operation="retire", actor=platform_admin, reason="EOL")
    assert set(fleet[2].gpus.values_list("status", flat=True)) == {GpuStatus.RETIRED}
    assert AuditEvent.objects.filter(action="gpu.retire").count() == 4
    with pytest.raises(ConflictError) as refused:
        node_change_state(node=fleet[2], operation="undrain", actor=platform_admin)
    assert refused.value.code == "invalid_state"


def test_invalid_transition_answers_409_and_changes_nothing(platform_admin, fleet):
    node = fleet[0]
    response = client_for(platform_admin).post(f"/api/v1/nodes/{node.pk}/undrain/", format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "invalid_state"
    assert Node.objects.get(pk=node.pk).status == NodeStatus.UP
    assert not AuditEvent.objects.exists()


def test_gpu_drain_and_undrain(platform_admin, fleet):
    gpu = fleet[0].gpus.first()
    api = client_for(platform_admin)
    assert api.post(f"/api/v1/gpus/{gpu.pk}/drain/", format="json").json()["status"] == "drained"
    assert not Gpu.objects.schedulable().filter(pk=gpu.pk).exists()
    assert api.post(f"/api/v1/gpus/{gpu.pk}/drain/", format="json").status_code == 409
    assert api.post(f"/api/v1/gpus/{gpu.pk}/undrain/", format="json").json()["status"] == "active"
    assert [e.action for e in AuditEvent.objects.order_by("id")] == ["gpu.drain", "gpu.undrain"]


def test_gpu_on_retired_node_cannot_be_undrained(platform_admin, fleet):
    gpu = fleet[0].gpus.first()
    gpu_change_state(gpu=gpu, operation="drain", actor=platform_admin)
    Node.objects.filter(pk=fleet[0].pk).update(status=NodeStatus.RETIRED)
    with pytest.raises(ConflictError):
        gpu_change_state(gpu=gpu, operation="undrain", actor=platform_admin)


def test_fleet_page_drain_form_works_for_admin_only(client, platform_admin, member, fleet):
    node = fleet[1]
    client.force_login(member)
    assert client.post(f"/fleet/nodes/{node.pk}/drain/").status_code == 403
    assert b"Drain</button>" not in client.get("/fleet/").content
    client.force_login(platform_admin)
    response = client.post(f"/fleet/nodes/{node.pk}/drain/", {"reason": "rack move"}, follow=True)
    assert "h100-b: drain done." in response.content.decode()
    node.refresh_from_db()
    assert node.status == NodeStatus.DRAINED


def test_fleet_page_has_an_anchor_per_gpu_for_dashboard_links(client, member, fleet):
    client.force_login(member)
    page = client.get("/fleet/").content.decode()
    for gpu in fleet[0].gpus.all():
        assert f'id="gpu-{gpu.pk}"' in page


def test_undrain_keeps_an_unreachable_node_unreachable_until_its_agent_reports(
    platform_admin, fleet
):
    from datetime import timedelta

    from django.utils import timezone

    from apps.fleet.services import node_set_reachable
    from apps.telemetry.ingest import telemetry_ingest

    node = fleet[0]
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(last_seen=now - timedelta(hours=1))
    node.refresh_from_db()
    node_set_reachable(node=node, reachable=False, reason="silent")
    node_change_state(node=node, operation="drain", actor=platform_admin)
    node_change_state(node=node, operation="undrain", actor=platform_admin)
    node.refresh_from_db()
    assert node.status == NodeStatus.UNREACHABLE
    assert not Gpu.objects.schedulable().filter(node=node).exists()
    assert AuditEvent.objects.get(action="node.undrain").after == {"status": "unreachable"}

    uuid = node.gpus.first().uuid
    telemetry_ingest(batch={"node": node.hostname, "seq": 1, "samples": [
        {"uuid": uuid, "ts": now.timestamp(), "util_gpu": 5}
    ]})  # fmt: skip
    assert Node.objects.get(pk=node.pk).status == NodeStatus.UP


def test_undrain_of_a_node_that_reported_while_drained_is_up(platform_admin, fleet):
    from datetime import timedelta

    from django.utils import timezone

    from apps.fleet.services import node_set_reachable

    node = fleet[0]
    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now() - timedelta(hours=1))
    node.refresh_from_db()
    node_set_reachable(node=node, reachable=False, reason="silent")
    node_change_state(node=node, operation="drain", actor=platform_admin)
    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now())  # its agent reported
    node_change_state(node=node, operation="undrain", actor=platform_admin)
    assert Node.objects.get(pk=node.pk).status == NodeStatus.UP


def test_a_node_silent_while_drained_comes_back_lost_and_its_jobs_are_requeued(
    platform_admin, fleet, member, team, h100, quotas
):
    from datetime import timedelta

    from django.utils import timezone

    from apps.jobs.choices import JobStatus
    from apps.jobs.dispatch import schedule_cycle
    from apps.jobs.services import job_submit

    job = job_submit(
        actor=member, team=team, argv=["train"], gpu_model=h100, gpu_count=2,
        max_runtime_seconds=600,
    )  # fmt: skip
    schedule_cycle()
    job.refresh_from_db()
    node = job.node
    node_change_state(node=node, operation="drain", actor=platform_admin)
    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now() - timedelta(hours=1))
    node_change_state(node=node, operation="undrain", actor=platform_admin)
    assert Node.objects.get(pk=node.pk).status == NodeStatus.UNREACHABLE
    job.refresh_from_db()
    assert job.status == JobStatus.REQUEUED
