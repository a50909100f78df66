import pytest

from apps.audit.models import AuditEvent
from apps.fleet.models import Gpu, Node
from apps.reservations.services import reservation_create
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def test_draining_a_gpu_moves_future_booking_to_a_free_gpu(
    member, platform_admin, quotas, h100, tomorrow_9
):
    from datetime import timedelta

    reservation = reservation_create(
        team=quotas[0].team,
        user=member,
        gpu_model=h100,
        count=2,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=2),
    )
    victim = reservation.holdings.first().gpu
    response = client_for(platform_admin).post(
        f"/api/v1/gpus/{victim.pk}/drain/", {}, format="json"
    )
    assert response.status_code == 200
    moved = response.json()["relocation"]["moved"]
    assert [m["reservation"] for m in moved] == [reservation.pk]
    held = set(reservation.holdings.filter(active=True).values_list("gpu_id", flat=True))
    assert victim.pk not in held and len(held) == 2
    assert AuditEvent.objects.filter(action="reservation.relocate").count() == 1


def test_draining_when_no_gpu_is_free_tells_the_team(
    member,
    outsider,
    platform_admin,
    quotas,
    h100,
    tomorrow_9,
    mailoutbox,
    django_capture_on_commit_callbacks,
):
    from datetime import timedelta

    mine = reservation_create(
        team=quotas[0].team,
        user=member,
        gpu_model=h100,
        count=8,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=2),
        same_node=True,
    )
    reservation_create(
        team=quotas[1].team,
        user=outsider,
        gpu_model=h100,
        count=8,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=2),
    )
    node = Node.objects.get(pk=mine.holdings.first().gpu.node_id)
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(platform_admin).post(
            f"/api/v1/nodes/{node.pk}/drain/", {}, format="json"
        )
    report = response.json()["relocation"]
    assert report["moved"] == [] and len(report["unresolved"]) == 8
    assert len(mailoutbox) == 1 and "lost 8 GPUs" in mailoutbox[0].subject
    assert member.email in mailoutbox[0].to
    assert not Gpu.objects.schedulable().filter(node=node).exists()


def test_fleet_page_tells_admin_which_drains_affect_bookings(
    client, member, platform_admin, quotas, h100, tomorrow_9
):
    from datetime import timedelta

    reservation = reservation_create(
        team=quotas[0].team,
        user=member,
        gpu_model=h100,
        count=3,
        same_node=True,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=1),
    )
    node = reservation.holdings.first().gpu.node
    client.force_login(platform_admin)
    page = client.get("/fleet/").content.decode()
    assert f"Drain {node.hostname}? It gets no new bookings or jobs. 3 booked GPU holdings" in page
    assert "3 open GPU bookings" in page
