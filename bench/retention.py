"""Retention of one day of raw samples: the portal's path (drop the day's partition) beside the
floor the old path had to beat (one plain `DELETE ... WHERE ts < cutoff` of the same rows) and
the old path itself (batched deletes by primary key), in one run on the same rows.

Rows: --gpus GPUs polled every 15 s for one day (5,760 samples per GPU; 10,000 GPUs make the
57.6 million rows a day the target speaks of; the default 1,000 GPUs keeps the run to minutes).
The day is loaded with a raw COPY before each measurement; the COPY is not timed.

Run: .venv/bin/python bench/retention.py [--gpus 1000] [--old-path]
Uses its own PostgreSQL database (portal_bench_retention, dropped and rebuilt).
"""

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

POLLS_PER_DAY = 24 * 3600 // 15


def setup(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()
    from bench.common import recreate_database

    recreate_database()


def load_day(gpu_ids: list[int], day: datetime) -> int:
    """One day of samples of every GPU, by raw COPY (into whichever partition holds the day)."""
    from django.db import connection

    rows = 0
    with connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor, for COPY
        sql = "COPY telemetry_gpusample (gpu_id, ts, util_gpu, power_w) FROM STDIN"
        with raw.copy(sql) as copy:
            for poll in range(POLLS_PER_DAY):
                ts = day + timedelta(seconds=15 * poll)
                for gpu_id in gpu_ids:
                    copy.write_row((gpu_id, ts, 50, 300.0))
                    rows += 1
        cursor.execute("ANALYZE telemetry_gpusample")
    return rows


def fleet(gpus: int) -> list[int]:
    from apps.fleet.models import Gpu, GpuModel, Node

    model = GpuModel.objects.create(name="H100-SXM-80GB", memory_mib=81559)
    nodes = Node.objects.bulk_create(Node(hostname=f"gpu-{n:04d}") for n in range(gpus // 8))
    created = Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-{node.hostname}-{i}", model=model)
        for node in nodes
        for i in range(8)
    )
    return [gpu.pk for gpu in created]


def timed(action) -> tuple[float, object]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument(
        "--old-path", action="store_true", help="also time the old batched deletes (slow)"
    )
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/portal_bench_retention"
    )
    args = parser.parse_args()
    setup(args.database_url)

    from django.conf import settings
    from django.db import connection

    from apps.telemetry import partitions
    from apps.telemetry.models import GpuSample
    from apps.telemetry.services import _delete_in_batches, telemetry_retention

    now = datetime.now(UTC).replace(hour=1, minute=0, second=0, microsecond=0)
    day = now - timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS + 1)
    day = day.replace(hour=0)
    cutoff = now - timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS)
    gpu_ids = fleet(args.gpus)
    print(f"{len(gpu_ids)} GPUs, one day of 15 s samples = {len(gpu_ids) * POLLS_PER_DAY:,} rows")

    partitions.ensure_partitions(now=now, since=day.date())
    rows = load_day(gpu_ids, day)
    portal_s, result = timed(lambda: telemetry_retention(now=now))
    assert not GpuSample.objects.filter(ts__lt=cutoff).exists()
    print(f"portal (drop the day's partition): {portal_s:8.3f} s  ({result['samples']:,} rows)")

    partitions.ensure_partitions(now=now, since=day.date())
    load_day(gpu_ids, day)
    with connection.cursor() as cursor:
        floor_s, _ = timed(
            lambda: cursor.execute("DELETE FROM telemetry_gpusample WHERE ts < %s", [cutoff])
        )
    print(f"raw SQL (one DELETE of the rows):   {floor_s:8.3f} s")

    print(f"portal / raw DELETE: {portal_s / floor_s:.4f}x")
    print(f"target: a day of raw samples in < 1 s: {'met' if portal_s < 1 else 'missed'}")
    if not args.old_path:
        return
    load_day(gpu_ids, day)
    old_s, deleted = timed(lambda: _delete_in_batches(GpuSample.objects.filter(ts__lt=cutoff)))
    assert deleted == rows
    print(f"old path (batched deletes by id):   {old_s:8.3f} s")
    print(f"portal / old path:   {portal_s / old_s:.4f}x")


if __name__ == "__main__":
    main()
