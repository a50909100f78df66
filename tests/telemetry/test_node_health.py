"""Node health judges by when the agent sent, and never while its batches may still wait in the
real Redis telemetry queue (a broker pause, a drain that is behind or was down)."""

from datetime import timedelta

import pytest

from apps.fleet.choices import NodeStatus
from apps.fleet.models import Gpu, Node
from apps.telemetry.drain import telemetry_drain
from apps.telemetry.models import DrainHeartbeat
from apps.telemetry.services import node_health_withheld, nodes_mark_unreachable
from tests.telemetry.conftest import sample

pytestmark = pytest.mark.django_db(transaction=True)


def agent_batch(seq, sent, uuids, node="h100-a"):
    """A batch as the agent sends it: stamped with its own clock."""
    return {
        "node": node,
        "seq": seq,
        "sent_at": sent.timestamp(),
        "samples": [sample(u, sent.timestamp()) for u in uuids],
    }


@pytest.fixture
def uuids(fleet):
    return sorted(Gpu.objects.filter(node__hostname="h100-a").values_list("uuid", flat=True))


def _paused(now, seconds):
    """The drain ran unbroken until the broker paused `seconds` ago; every node last sent then."""
    paused_at = now - timedelta(seconds=seconds)
    DrainHeartbeat.objects.create(
        pk=1, listening_since=now - timedelta(hours=1), last_run_at=paused_at, backlog=False
    )
    Node.objects.update(last_seen=paused_at - timedelta(seconds=1))


def test_broker_pause_marks_no_node_unreachable_before_the_drain_stored_their_batches(
    uuids, now, telemetry_queue
):
    _paused(now, 74)
    # The broker is back: the agents flush the batches they buffered meanwhile.
    for seq, age in enumerate(range(70, -1, -15), start=1):
        telemetry_queue(agent_batch(seq, now - timedelta(seconds=age), uuids))

    # The minutely check runs first: the portal heard nothing for 74 s, the node did send.
    assert nodes_mark_unreachable(now=now) == []
    assert "has not run since" in node_health_withheld(now)
    assert set(Node.objects.values_list("status", flat=True)) == {NodeStatus.UP}

    assert telemetry_drain()["stored"] == 5 * 8
    # last_seen is when the agent sent its newest batch, not when the portal stored it.
    assert Node.objects.get(hostname="h100-a").last_seen == now - timedelta(seconds=10)
    # The drain runs again, but only just: nodes get a whole silence window to be heard.
    assert nodes_mark_unreachable() == []
    assert "runs again only since" in node_health_withheld(now + timedelta(seconds=1))
    assert Node.objects.get(hostname="h100-b").status == NodeStatus.UP


def test_old_batches_still_queued_keep_the_node_from_being_judged(uuids, now, telemetry_queue):
    _paused(now, 0)
    Node.objects.update(last_seen=now - timedelta(seconds=200))
    # A backlog: batches sent 100 s ago and later, bigger than one drain takes.
    for seq, age in enumerate((100, 90, 80, 0), start=1):
        telemetry_queue(agent_batch(seq, now - timedelta(seconds=age), uuids))

    assert telemetry_drain(max_samples=8)["stored"] == 8  # only the oldest batch
    node = Node.objects.get(hostname="h100-a")
    assert node.last_seen == now - timedelta(seconds=100)  # older than the 45 s threshold
    assert nodes_mark_unreachable() == []
    assert node_health_withheld(now) == "agents' batches are still queued"
    assert Node.objects.get(hostname="h100-a").status == NodeStatus.UP

    while telemetry_drain(max_samples=8)["batches"]:
        pass
    assert Node.objects.get(hostname="h100-a").last_seen == now
    DrainHeartbeat.objects.update(listening_since=now - timedelta(hours=1))
    # Caught up: the silent nodes are judged, the one that sent is not.
    assert sorted(nodes_mark_unreachable()) == ["h100-b", "l40s-a"]
    assert Node.objects.get(hostname="h100-a").status == NodeStatus.UP


def test_a_late_old_batch_neither_moves_last_seen_back_nor_brings_a_lost_node_up(
    uuids, now, telemetry_queue, drain_listening
):
    node = Node.objects.get(hostname="h100-a")
    Node.objects.filter(pk=node.pk).update(last_seen=now - timedelta(minutes=5))
    assert "h100-a" in nodes_mark_unreachable(now=now)
    # A batch the agent sent 4 minutes ago, before the node was declared lost.
    telemetry_queue(agent_batch(1, now - timedelta(minutes=4), uuids))
    telemetry_drain()
    node.refresh_from_db()
    assert node.last_seen == now - timedelta(minutes=4)
    assert node.status == NodeStatus.UNREACHABLE  # proves nothing about now
    telemetry_queue(agent_batch(2, now - timedelta(minutes=6), uuids))
    telemetry_drain()
    assert Node.objects.get(pk=node.pk).last_seen == now - timedelta(minutes=4)
    telemetry_queue(agent_batch(3, now, uuids))
    telemetry_drain()
    node.refresh_from_db()
    assert node.last_seen == now and node.status == NodeStatus.UP


def test_drain_record_starts_a_new_unbroken_run_after_a_gap(fleet, telemetry_queue, settings):
    telemetry_drain()
    first = DrainHeartbeat.objects.get()
    assert first.listening_since <= first.last_run_at and not first.backlog
    telemetry_drain()
    assert DrainHeartbeat.objects.get().listening_since == first.listening_since
    stale = timedelta(seconds=settings.TELEMETRY_DRAIN_STALE_SECONDS + 1)
    DrainHeartbeat.objects.update(last_run_at=first.last_run_at - stale)
    telemetry_drain()
    assert DrainHeartbeat.objects.get().listening_since > first.listening_since


def test_a_clock_far_ahead_or_garbage_stamp_does_not_keep_a_node_alive(uuids, now, drain_listening):
    from apps.telemetry.ingest import telemetry_ingest

    result = telemetry_ingest(
        batch={"node": "h100-a", "seq": 1, "sent_at": 1e300, "samples": []}, now=now
    )
    assert result.stored == 0
    assert Node.objects.get(hostname="h100-a").last_seen == now
    telemetry_ingest(batch={"node": "h100-b", "seq": 1, "sent_at": -1e300, "samples": []})
    assert Node.objects.get(hostname="h100-b").last_seen.year == 1970
