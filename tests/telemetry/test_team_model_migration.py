"""The migration that adds the (hour, team, GPU model) sums fills them in from the hour rollups
already stored, so the month-long dashboards keep their history after an upgrade."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

PREVIOUS = ("telemetry", "0003_gpm_activity_metrics")
ADDED = ("telemetry", "0004_team_model_hour_rollup")
HOUR = datetime(2026, 11, 2, 9, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_existing_hour_rollups_are_summed_per_hour_team_and_model():
    executor = MigrationExecutor(connection)
    # every other app as it is now, telemetry just before the sums
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
        gpu.objects.create(
            node=node, index=i, uuid=f"GPU-old-{i}", model=model, in_fleet_since=HOUR
        )
        for i, model in enumerate([h100, h100, l40s])
    ]
    hour_rollup = old.get_model("telemetry", "GpuHourRollup")
    for h in range(2):
        for g, owner, busy, sm in [
            (gpus[0], team, 3600, 40.0),
            (gpus[1], team, 1800, None),
            (gpus[2], None, 0, None),
        ]:
            hour_rollup.objects.create(
                gpu=g, bucket=HOUR + timedelta(hours=h), team=owner, samples=240,
                util_avg=50, busy_seconds=busy, sm_active_avg=sm,
            )  # fmt: skip

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    try:
        executor.migrate(after)
        summed = executor.loader.project_state(after).apps.get_model(
            "telemetry", "TeamModelHourRollup"
        )
        rows = {(r.bucket, r.team_id, r.gpu_model_id): r for r in summed.objects.all()}
        assert len(rows) == 2 * 2  # per hour: vision on H100, unallocated L40S
        vision = rows[(HOUR, team.pk, h100.pk)]
        assert (vision.gpu_hours, vision.samples, vision.busy_seconds) == (2, 480, 5400)
        assert (vision.util_sum, vision.util_n) == (100, 2)
        assert (vision.sm_active_sum, vision.sm_active_n) == (40, 1)
        pool = rows[(HOUR + timedelta(hours=1), None, l40s.pk)]
        assert (pool.gpu_hours, pool.busy_seconds, pool.sm_active_n) == (1, 0, 0)
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
