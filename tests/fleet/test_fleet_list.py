"""The fleet page's filters and sortable GPU columns: a node shows while one of its GPUs
matches, its own counts unchanged; a bad filter value gets a message, never a 500."""

import re

import pytest

from apps.fleet.choices import GpuHealth, NodeStatus
from apps.fleet.models import Gpu, Node

pytestmark = pytest.mark.django_db


def _gpus(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr id="gpu-(\d+)"', html)]


def _nodes(html: str) -> list[str]:
    return re.findall(r'<section class="card node" data-node="([^"]+)"', html)


def test_filters_narrow_the_gpus_and_nodes(client, member, fleet):
    client.force_login(member)
    html = client.get("/fleet/?model=L40S-48GB").content.decode()
    assert _nodes(html) == ["l40s-a"]
    assert sorted(_gpus(html)) == sorted(
        Gpu.objects.filter(node__hostname="l40s-a").values_list("pk", flat=True)
    )
    sick = Gpu.objects.get(node__hostname="h100-b", index=3)
    Gpu.objects.filter(pk=sick.pk).update(health=GpuHealth.DEGRADED)
    html = client.get("/fleet/?health=degraded").content.decode()
    assert _nodes(html) == ["h100-b"] and _gpus(html) == [sick.pk]
    # The node's counts stay those of the whole node.
    assert "8 GPUs" in html
    Node.objects.filter(hostname="h100-a").update(status=NodeStatus.DRAINED)
    assert _nodes(client.get("/fleet/?node_status=drained").content.decode()) == ["h100-a"]
    assert _nodes(client.get("/fleet/?q=H100-B").content.decode()) == ["h100-b"]
    assert "No GPUs match." in client.get("/fleet/?q=nothing-here").content.decode()


def test_a_header_sorts_every_nodes_gpus(client, member, fleet):
    client.force_login(member)
    default = client.get("/fleet/").content.decode()
    descending = client.get("/fleet/?sort=-index").content.decode()
    assert _nodes(descending) == _nodes(default)
    for hostname in ("h100-a", "l40s-a"):
        ids = list(
            Gpu.objects.filter(node__hostname=hostname)
            .order_by("index")
            .values_list("pk", flat=True)
        )
        card = descending.split(f'data-node="{hostname}"', 1)[1].split("</section>", 1)[0]
        assert _gpus(card) == ids[::-1]
    assert re.search(r'href="\?sort=index[&"]', descending)  # the next click: ascending


@pytest.mark.parametrize(
    ("query", "message"),
    [("status=melted", "Status: Select a valid choice."), ("model=Z9000", "GPU model: Select")],
)
def test_bad_filter_values_get_a_message(client, member, fleet, query, message):
    client.force_login(member)
    response = client.get(f"/fleet/?{query}")
    assert response.status_code == 200
    html = response.content.decode()
    assert message in html and _gpus(html) == []


def test_members_see_no_gpu_actions_admins_do(client, member, platform_admin, fleet):
    client.force_login(member)
    assert "Drain GPU" not in client.get("/fleet/?sort=model").content.decode()
    client.force_login(platform_admin)
    assert "Drain GPU 0 on h100-a" in client.get("/fleet/?sort=model").content.decode()
