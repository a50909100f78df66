"""Raw samples and minute rollups in daily PostgreSQL partitions: the migration keeps every row
and id (both ways), new days are created ahead, rows that arrived before their day's partition
move into it, and retention drops whole days."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from apps.telemetry import partitions
from apps.telemetry.ingest import store_samples
from apps.telemetry.models import GpuMinuteRollup, GpuSample
from apps.telemetry.services import telemetry_retention

PREVIOUS = ("telemetry", "0007_verbose_names")
PARTITIONED = ("telemetry", "0008_partition_samples_and_minute_rollups")
SAMPLES = "telemetry_gpusample"


def _home(table: str, pk: int) -> str:
    """The partition a row is stored in."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {table} WHERE id = %s", [pk])  # noqa: S608
        return cursor.fetchone()[0]


def _sample(gpu, ts, util=1):
    return (gpu.id, ts, util, 1, 1, 1.0, 1, 1)


@pytest.mark.django_db(transaction=True)
def test_migration_moves_every_row_and_id_into_day_partitions_and_back():
    executor = MigrationExecutor(connection)
    others = [leaf for leaf in executor.loader.graph.leaf_nodes() if leaf[0] != "telemetry"]
    latest = [leaf for leaf in executor.loader.graph.leaf_nodes() if leaf[0] == "telemetry"]
    before, after = [*others, PREVIOUS], [*others, PARTITIONED]
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        model = old.get_model("fleet", "GpuModel").objects.create(name="H100", memory_mib=1)
        node = old.get_model("fleet", "Node").objects.create(hostname="old-node")
        gpu = old.get_model("fleet", "Gpu").objects.create(
            node=node, index=0, uuid="GPU-old-0", model=model, in_fleet_since=datetime.now(UTC)
        )
        today = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
        stamps = [today - timedelta(days=d) for d in (40, 2, 1, 0)]
        sample = old.get_model("telemetry", "GpuSample")
        minute = old.get_model("telemetry", "GpuMinuteRollup")
        for ts in stamps:
            sample.objects.create(gpu=gpu, ts=ts, util_gpu=7)
            minute.objects.create(gpu=gpu, bucket=ts, samples=4, busy_seconds=60)
        ids = sorted(sample.objects.values_list("id", flat=True))

        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(after)
        assert partitions.is_partitioned(SAMPLES)
        assert partitions.is_partitioned("telemetry_gpuminuterollup")
        new = executor.loader.project_state(after).apps.get_model("telemetry", "GpuSample")
        assert sorted(new.objects.values_list("id", flat=True)) == ids
        for row in new.objects.all():
            # the oldest day gets its own partition too: the data decides where days start
            assert _home(SAMPLES, row.id) == partitions.partition_name(SAMPLES, row.ts.date())
        added = new.objects.create(gpu_id=gpu.id, ts=today + timedelta(hours=1), util_gpu=1)
        assert added.id > max(ids)  # the sequence continues after the copied ids
        with pytest.raises(IntegrityError), transaction.atomic():
            new.objects.create(gpu_id=gpu.id, ts=today, util_gpu=2)  # (gpu, ts) still unique
        with pytest.raises(IntegrityError), transaction.atomic():
            new.objects.create(gpu_id=gpu.id + 999, ts=today + timedelta(hours=2))

        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(before)
        assert not partitions.is_partitioned(SAMPLES)
        plain = executor.loader.project_state(before).apps.get_model("telemetry", "GpuSample")
        assert sorted(plain.objects.values_list("id", flat=True)) == [*ids, added.id]
        assert plain.objects.create(gpu_id=gpu.id, ts=today + timedelta(hours=3)).id > added.id
        assert _home(SAMPLES, added.id) == SAMPLES
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate([*others, *latest])


@pytest.mark.django_db
def test_days_are_created_ahead_once_and_early_rows_move_into_their_day(fleet, h100):
    gpu = h100.gpus.first()
    far = datetime.now(UTC) + timedelta(days=30)
    store_samples([_sample(gpu, far)])  # no partition for that day yet
    early = GpuSample.objects.get(ts=far)
    assert _home(SAMPLES, early.id) == f"{SAMPLES}_default"

    created = partitions.ensure_partitions(now=far)
    assert partitions.partition_name(SAMPLES, far.date()) in created
    assert partitions.partition_name("telemetry_gpuminuterollup", far.date()) in created
    assert _home(SAMPLES, early.id) == partitions.partition_name(SAMPLES, far.date())
    days = partitions.day_partitions(SAMPLES)
    for ahead in range(-1, 4):
        assert (far + timedelta(days=ahead)).date() in days
    assert partitions.ensure_partitions(now=far) == []


@pytest.mark.django_db(transaction=True)  # as in production: the rows were committed earlier
def test_retention_drops_whole_days_and_deletes_old_rows_outside_them(fleet, h100, settings):
    settings.TELEMETRY_RAW_RETENTION_DAYS = 7
    settings.TELEMETRY_MINUTE_RETENTION_DAYS = 7
    gpu = h100.gpus.first()
    now = datetime.now(UTC).replace(hour=6, minute=0, second=0, microsecond=0)
    partitions.ensure_partitions(now=now, since=(now - timedelta(days=10)).date())
    cutoff = now - timedelta(days=7)
    gone = [now - timedelta(days=9), now - timedelta(days=8, hours=1)]  # days wholly past
    same_day = cutoff - timedelta(hours=1)  # before the cutoff, but its day is not yet over
    kept = [same_day, now - timedelta(days=1), now]
    ancient = datetime(2001, 1, 1, tzinfo=UTC)  # in the default partition
    store_samples([_sample(gpu, ts) for ts in [*gone, *kept, ancient]])
    for ts in [*gone, *kept, ancient]:
        GpuMinuteRollup.objects.create(gpu=gpu, bucket=ts, samples=4, busy_seconds=0)

    result = telemetry_retention(now=now)

    assert result["samples"] == len(gone) + 1
    assert result["minute_rollups"] == len(gone) + 1
    assert sorted(GpuSample.objects.values_list("ts", flat=True)) == kept
    assert sorted(GpuMinuteRollup.objects.values_list("bucket", flat=True)) == kept
    days = partitions.day_partitions(SAMPLES)
    assert min(days) == same_day.date()
    assert all(day not in days for day in (g.date() for g in gone))


@pytest.mark.django_db
def test_retention_on_an_unpartitioned_table_still_deletes_exactly_before_the_cutoff(
    fleet, h100, settings, monkeypatch
):
    """The path SQLite takes (and a PostgreSQL table not yet migrated)."""
    monkeypatch.setattr(partitions, "partitioning_available", lambda: False)
    settings.TELEMETRY_RAW_RETENTION_DAYS = 7
    gpu = h100.gpus.first()
    now = datetime.now(UTC).replace(microsecond=0)
    cutoff = now - timedelta(days=7)
    store_samples([_sample(gpu, cutoff - timedelta(seconds=1)), _sample(gpu, cutoff)])
    assert telemetry_retention(now=now)["samples"] == 1
    assert list(GpuSample.objects.values_list("ts", flat=True)) == [cutoff]
