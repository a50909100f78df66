"""A whole fleet's poll in one drain: every node's agent stamp recorded by one statement,
whatever the fleet's size."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.fleet.models import Node
from apps.telemetry.ingest import telemetry_ingest_many
from apps.telemetry.models import GpuSample, IngestBatch
from tests.factories import make_node_with_gpus
from tests.telemetry.conftest import sample

pytestmark = pytest.mark.django_db

PER_NODE = 4


def poll(nodes: int, now, *, prefix: str):
    """`nodes` nodes, each with a different history of `last_seen`, and the drain of one poll
    of all of them. Returns the batches and
    the `last_seen` each node must have afterwards."""
    batches, expected = [], {}
    for i in range(nodes):
        hostname = f"{prefix}-{i:03d}"
        make_node_with_gpus(hostname, PER_NODE)
        sent = now - timedelta(seconds=i % 7)
        before = [None, now - timedelta(minutes=3), now + timedelta(minutes=1)][i % 3]
        Node.objects.filter(hostname=hostname).update(last_seen=before)
        # A stamp older than the one recorded (a batch that waited in the queue) keeps it.
        expected[hostname] = sent if before is None or before < sent else before
        samples = [
            sample(f"GPU-{hostname}-{k}", (now - timedelta(seconds=15)).timestamp())
            for k in range(PER_NODE)
        ]
        batches.append(
            {"node": hostname, "seq": 1, "samples": samples, "sent_at": sent.timestamp()}
        )
    return batches, expected


def drained(batches, now):
    with CaptureQueriesContext(connection) as queries:
        results = telemetry_ingest_many(batches=batches, now=now)
    return results, [q["sql"] for q in queries.captured_queries]


def test_a_poll_stamps_every_node_with_one_statement_whatever_the_fleet_size(now):
    shapes = {}
    for nodes, prefix in ((3, "small"), (40, "large")):
        batches, expected = poll(nodes, now, prefix=prefix)
        results, statements = drained(batches, now)
        assert [r.stored for r in results] == [PER_NODE] * nodes
        stamped = dict(
            Node.objects.filter(hostname__startswith=f"{prefix}-").values_list(
                "hostname", "last_seen"
            )
        )
        assert stamped == expected
        assert GpuSample.objects.filter(gpu__node__hostname__startswith=prefix).count() == (
            nodes * PER_NODE
        )
        assert IngestBatch.objects.filter(node__startswith=prefix).count() == nodes
        touching_nodes = [sql for sql in statements if "fleet_node" in sql]
        assert len(touching_nodes) == 1 and touching_nodes[0].lstrip().startswith("WITH")
        assert "WHEN" not in touching_nodes[0]  # the stamps travel as arrays, not a CASE
        shapes[nodes] = len(statements)
    assert shapes[3] == shapes[40]


def test_a_late_poll_never_moves_a_stamp_back_and_a_redelivered_one_is_skipped(now):
    batches, expected = poll(6, now, prefix="late")
    unknown = {"node": "late-unknown", "seq": 1, "samples": [], "sent_at": now.timestamp()}
    results = telemetry_ingest_many(batches=[*batches, unknown], now=now)
    assert results[-1].rejected == {"unknown_node": 1}
    assert not Node.objects.filter(hostname="late-unknown").exists()
    older = [{**b, "sent_at": (now - timedelta(minutes=10)).timestamp()} for b in batches[:-1]]
    results, _ = drained(older, now)
    assert all(r.duplicate_batch for r in results)
    assert (
        dict(Node.objects.filter(hostname__startswith="late-").values_list("hostname", "last_seen"))
        == expected
    )
