"""The migration that gives GPUs their time in the fleet fills it in for GPUs that already
exist: they joined when their node was registered; one already retired stays uncharged."""

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("fleet", "0002_maintenance_window")]
AFTER = [("fleet", "0003_gpu_in_fleet_since")]
REGISTERED = datetime(2026, 10, 29, 10, 32, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_existing_gpus_join_the_fleet_when_their_node_was_registered():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    model = old.get_model("fleet", "GpuModel").objects.create(name="H100", memory_mib=1)
    node = old.get_model("fleet", "Node").objects.create(hostname="old-node")
    old.get_model("fleet", "Node").objects.filter(pk=node.pk).update(created_at=REGISTERED)
    gpu_model = old.get_model("fleet", "Gpu")
    gpu_model.objects.create(node=node, index=0, uuid="GPU-old-0", model=model)
    gpu_model.objects.create(node=node, index=1, uuid="GPU-old-1", model=model, status="retired")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    try:
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps.get_model("fleet", "Gpu")
        active, retired = new.objects.order_by("index")
        assert active.in_fleet_since == REGISTERED and active.retired_at is None
        assert retired.in_fleet_since == REGISTERED and retired.retired_at == REGISTERED
    finally:
        # Back to the latest schema (migrations that depend on this one included).
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
