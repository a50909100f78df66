from datetime import timedelta

import pytest

from apps.audit.models import AuditEvent
from apps.fleet.models import MaintenanceWindow, Node
from apps.reservations import selectors
from apps.reservations.services import reservation_create
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/maintenance-windows/"


def _window(api, hostname, start, hours=2, reason="BIOS update"):
    return api.post(
        URL,
        {
            "node": hostname,
            "start": start.isoformat(),
            "end": (start + timedelta(hours=hours)).isoformat(),
            "reason": reason,
        },
        format="json",
    )


def test_gpus_of_a_node_in_maintenance_are_never_offered(
    platform_admin, member, quotas, h100, tomorrow_9
):
    assert _window(client_for(platform_admin), "h100-a", tomorrow_9).status_code == 201
    slots = selectors.availability_search(
        gpu_model=h100,
        count=16,
        duration=timedelta(hours=1),
        after=tomorrow_9 - timedelta(hours=1),
        horizon=tomorrow_9 + timedelta(days=2),
        slot=timedelta(minutes=15),
    )
    # all 16 H100 are free only before the window starts (1 h fits) or after it ends
    assert slots[0].start == tomorrow_9 - timedelta(hours=1)
    assert slots[0].latest_start == tomorrow_9 - timedelta(hours=1)
    assert slots[1].start == tomorrow_9 + timedelta(hours=2)
    response = client_for(member).post(
        "/api/v1/reservations/",
        {
            "team": "vision",
            "gpu_model": "H100-SXM-80GB",
            "count": 9,
            "start": tomorrow_9.isoformat(),
            "duration": "01:00:00",
        },
        format="json",
    )
    assert response.status_code == 409 and response.json()["detail"]["free_gpus"] == 8


def test_planning_maintenance_moves_overlapping_bookings_and_is_audited(
    platform_admin, member, quotas, h100, tomorrow_9
):
    booking = reservation_create(
        team=quotas[0].team,
        user=member,
        gpu_model=h100,
        count=4,
        same_node=True,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=3),
    )
    node = booking.holdings.first().gpu.node
    response = _window(client_for(platform_admin), node.hostname, tomorrow_9 + timedelta(hours=1))
    assert response.status_code == 201
    assert len(response.json()["relocation"]["moved"]) == 4
    held_nodes = set(
        booking.holdings.filter(active=True, end__gt=tomorrow_9).values_list(
            "gpu__node__hostname", flat=True
        )
    )
    assert held_nodes == {"h100-a", "h100-b"} - {node.hostname}
    assert AuditEvent.objects.filter(action="node.maintenance_schedule").count() == 1


@pytest.mark.parametrize(
    ("shift_hours", "hours", "reason", "field"),
    [(0, -1, "x", "end"), (-72, 1, "x", "end"), (0, 1, " ", "reason")],
)
def test_bad_maintenance_window_is_400(
    platform_admin, fleet, tomorrow_9, shift_hours, hours, reason, field
):
    response = _window(
        client_for(platform_admin),
        "h100-a",
        tomorrow_9 + timedelta(hours=shift_hours),
        hours=hours,
        reason=reason,
    )
    assert response.status_code == 400 and field in response.json()["detail"]
    assert not MaintenanceWindow.objects.exists()


def test_only_platform_admins_plan_or_cancel_maintenance(member, platform_admin, fleet, tomorrow_9):
    assert _window(client_for(member), "h100-a", tomorrow_9).status_code == 403
    window_id = _window(client_for(platform_admin), "h100-a", tomorrow_9).json()["id"]
    assert client_for(member).get(URL).json()["count"] == 1  # everyone can see them
    assert client_for(member).delete(f"{URL}{window_id}/").status_code == 403
    assert client_for(platform_admin).delete(f"{URL}{window_id}/").status_code == 204
    assert AuditEvent.objects.filter(action="node.maintenance_cancel").count() == 1


def test_fleet_page_plans_and_shows_maintenance(client, platform_admin, fleet, tomorrow_9):
    node = Node.objects.get(hostname="l40s-a")
    client.force_login(platform_admin)
    response = client.post(
        f"/fleet/nodes/{node.pk}/maintenance/",
        {
            "start": tomorrow_9.strftime("%Y-%m-%dT%H:%M"),
            "end": (tomorrow_9 + timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M"),
            "reason": "PSU swap",
        },
        follow=True,
    )
    page = response.content.decode()
    assert "Maintenance of l40s-a planned." in page
    assert 'data-testid="maintenance"' in page and "PSU swap" in page
    assert MaintenanceWindow.objects.get().start == tomorrow_9
