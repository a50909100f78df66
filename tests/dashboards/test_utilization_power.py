"""The utilization dashboard's unallocated pool leaves out GPUs powered down to save energy (as
the chargeback does): they are neither allocated nor free capacity. A booking on such a GPU is
its team's, not counted twice."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.dashboards import selectors
from apps.dashboards.selectors import UNALLOCATED
from apps.fleet.choices import PowerState
from apps.fleet.models import Gpu, Node, NodePowerEvent
from tests.dashboards.conftest import book

pytestmark = pytest.mark.django_db


def _power(node, at, *states):
    for from_state, to_state in zip(states, states[1:], strict=False):
        NodePowerEvent.objects.create(node=node, from_state=from_state, to_state=to_state, at=at)


@pytest.fixture
def l40s_off_for_six_hours(fleet):
    """The whole fleet (20 GPUs) in service for two days; l40s-a (4 GPUs) powered down from
    10 h to 4 h ago."""
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    Gpu.objects.update(in_fleet_since=now - timedelta(days=2))
    node = Node.objects.get(hostname="l40s-a")
    _power(node, now - timedelta(hours=10), PowerState.ON, PowerState.SUSPENDING)
    _power(node, now - timedelta(hours=10), PowerState.SUSPENDING, PowerState.OFF)
    _power(node, now - timedelta(hours=4), PowerState.OFF, PowerState.RESUMING)
    _power(node, now - timedelta(hours=4), PowerState.RESUMING, PowerState.ON)
    return now


def _unallocated(user, now):
    filters = selectors.parse_filters({"range": "7d"}, user, now=now)
    series = selectors.utilization_series(filters)
    assert series["step"] == timedelta(hours=1)
    return dict(zip(series["times"], series["allocated"][UNALLOCATED], strict=True))


def test_powered_down_gpus_are_not_unallocated_capacity(platform_admin, l40s_off_for_six_hours):
    now = l40s_off_for_six_hours
    pool = _unallocated(platform_admin, now)
    fleet = Gpu.objects.filter(mig_parent__isnull=True).count()
    assert fleet == 20
    for hours_ago in range(1, 13):
        t = now - timedelta(hours=hours_ago)
        expected = fleet - 4 if 4 < hours_ago <= 10 else fleet
        assert pool[t] == expected, f"{hours_ago} h ago"


def test_a_booking_on_a_powered_down_gpu_is_not_taken_off_twice(
    platform_admin, team, member, l40s_off_for_six_hours
):
    now = l40s_off_for_six_hours
    gpu = Gpu.objects.filter(node__hostname="l40s-a").order_by("index").first()
    book(team, member, [gpu], now - timedelta(hours=12), now - timedelta(hours=6))
    pool = _unallocated(platform_admin, now)
    assert pool[now - timedelta(hours=11)] == 19  # booked, node on
    assert pool[now - timedelta(hours=8)] == 16  # booked and powered down: one GPU, held
    assert pool[now - timedelta(hours=5)] == 16  # powered down, nobody holds it
    assert pool[now - timedelta(hours=3)] == 20


def test_power_saving_off_leaves_the_pool_as_it_was(platform_admin, fleet):
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    Gpu.objects.update(in_fleet_since=now - timedelta(days=2))
    pool = _unallocated(platform_admin, now)
    assert set(pool.values()) == {20.0}
    assert pool[now - timedelta(hours=1)] == 20
