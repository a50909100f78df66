"""The buttons the fleet page offers come from the transition table the services enforce."""

import pytest

from apps.fleet.choices import NodeStatus
from apps.fleet.models import Gpu, Node
from apps.fleet.services import gpu_change_state, node_change_state
from apps.fleet.transitions import NODE_TRANSITIONS, gpu_operations, node_operations
from portal.exceptions import ConflictError

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("status", NodeStatus.values)
def test_every_offered_node_operation_is_one_the_service_accepts(status, fleet, platform_admin):
    node = Node.objects.get(hostname="h100-a")
    Node.objects.filter(pk=node.pk).update(status=status)
    node.refresh_from_db()
    offered = node_operations(node)
    for operation in NODE_TRANSITIONS:
        Node.objects.filter(pk=node.pk).update(status=status)
        node.refresh_from_db()
        if operation in offered:
            node_change_state(node=node, operation=operation, actor=platform_admin)
        else:
            with pytest.raises(ConflictError):
                node_change_state(node=node, operation=operation, actor=platform_admin)


def test_gpus_of_a_drained_node_offer_nothing_and_refuse_drain(fleet, platform_admin):
    node = Node.objects.get(hostname="h100-a")
    node_change_state(node=node, operation="drain", actor=platform_admin)
    node.refresh_from_db()
    gpu = Gpu.objects.filter(node=node).first()
    assert gpu_operations(gpu, node) == []
    with pytest.raises(ConflictError) as refused:
        gpu_change_state(gpu=gpu, operation="drain", actor=platform_admin)
    assert refused.value.code == "invalid_state"


def test_fleet_page_shows_exactly_the_allowed_buttons(client, fleet, platform_admin):
    client.force_login(platform_admin)
    node = Node.objects.get(hostname="h100-a")
    node_change_state(node=node, operation="drain", actor=platform_admin)
    gpu = Gpu.objects.filter(node__hostname="h100-b").first()
    gpu_change_state(gpu=gpu, operation="drain", actor=platform_admin)
    page = client.get("/fleet/").content.decode()
    assert (
        f"/fleet/nodes/{node.pk}/undrain/" in page and f"/fleet/nodes/{node.pk}/drain/" not in page
    )
    drained_gpus = Gpu.objects.filter(node=node).values_list("pk", flat=True)
    assert not any(f"/fleet/gpus/{pk}/" in page for pk in drained_gpus)
    assert f"/fleet/gpus/{gpu.pk}/undrain/" in page and f"/fleet/gpus/{gpu.pk}/drain/" not in page
