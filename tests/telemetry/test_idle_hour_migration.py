"""The migration that adds the hourly idle sums fills them in from the idle intervals already
stored (as the minutely update would have written them), and goes back cleanly."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

PREVIOUS = ("telemetry", "0008_partition_samples_and_minute_rollups")
ADDED = ("telemetry", "0009_idle_hour_rollup")
HOUR = datetime(2026, 11, 2, 9, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_existing_idle_intervals_are_summed_per_hour_kind_team_and_model():
    executor = MigrationExecutor(connection)
    others = [leaf for leaf in executor.loader.graph.leaf_nodes() if leaf[0] != "telemetry"]
    before, after = [*others, PREVIOUS], [*others, ADDED]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    h100 = old.get_model("fleet", "GpuModel").objects.create(name="H100", memory_mib=1)
    l40s = old.get_model("fleet", "GpuModel").objects.create(name="L40S", memory_mib=1)
    team = old.get_model("teams", "Team").objects.create(slug="vision", name="Vision")
    node = old.get_model("fleet", "Node").objects.create(hostname="old-node")
    gpu = old.get_model("fleet", "Gpu")
    gpus = [
        gpu.objects.create(node=node, index=i, uuid=f"GPU-old-{i}", model=model)
        for i, model in enumerate([h100, h100, l40s])
    ]
    interval = old.get_model("telemetry", "IdleInterval")
    minute = timedelta(minutes=1)
    for g, kind, owner, start, end in [
        # 09:30 -> 11:10: 30 min, 60 min, 10 min
        (gpus[0], "held_idle", team, HOUR + 30 * minute, HOUR + 130 * minute),
        (gpus[1], "held_idle", team, HOUR + 50 * minute, HOUR + 55 * minute),
        (gpus[2], "unallocated", None, HOUR, HOUR + 60 * minute),
    ]:
        interval.objects.create(gpu=g, kind=kind, team=owner, start=start, end=end)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    try:
        executor.migrate(after)
        summed = executor.loader.project_state(after).apps.get_model("telemetry", "IdleHourRollup")
        us = 60 * 10**6
        assert sorted(
            summed.objects.values_list("bucket", "kind", "team_id", "gpu_model_id", "idle_us")
        ) == [
            (HOUR, "held_idle", team.pk, h100.pk, 35 * us),
            (HOUR, "unallocated", None, l40s.pk, 60 * us),
            (HOUR + timedelta(hours=1), "held_idle", team.pk, h100.pk, 60 * us),
            (HOUR + timedelta(hours=2), "held_idle", team.pk, h100.pk, 10 * us),
        ]
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(before)  # reversible
        assert "telemetry_idlehourrollup" not in connection.introspection.table_names()
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
