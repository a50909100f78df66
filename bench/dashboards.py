"""Dashboard endpoints on a month of fleet history, beside a raw fetch of the same rows.

Seeds 1,000 GPUs (125 nodes x 8, two models) and 30 days of hour rollups (720,000 rows, held
by 8 teams in turn, loaded with COPY), the bookings that hold them (~48,000 GPU holdings in
12-hour blocks: the utilization chart counts allocated GPUs from these), plus idle intervals
(~30 per GPU). Then times, as a
platform admin through Django's test client (the whole view: filters, SQL, figure building,
JSON), the 30-day utilization and idle endpoints and the right-sizing advice, and reports their
JSON size. The baseline is one raw psycopg fetch of the rollup rows those endpoints summarise
(no aggregation, no JSON); for the advice, one raw SQL GROUP BY of each booking GPU's rollups.
Targets: each endpoint < 300 ms (median of 5) and < 1 MB.

Run: .venv/bin/python bench/dashboards.py
Uses its own PostgreSQL database (portal_bench_dashboards, dropped and rebuilt).
"""

import io
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["DATABASE_URL"] = "postgres://postgres@127.0.0.1:5432/portal_bench_dashboards"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.common import recreate_database  # noqa: E402

NULL = "\\N"  # COPY's null
NODES, PER_NODE, DAYS, TEAMS, RUNS = 125, 8, 30, 8, 5
TARGET_MS, TARGET_BYTES = 300, 1_000_000
ROLLUP_COLUMNS = (
    "gpu_id, bucket, team_id, samples, util_avg, util_max, mem_used_avg_mib, mem_used_max_mib, "
    "power_avg_w, energy_j, busy_seconds"
)


def seed(now):
    from apps.fleet.models import Gpu, GpuModel, Node
    from apps.reservations.choices import ReservationStatus
    from apps.reservations.models import Reservation
    from apps.teams.models import Team, User

    rng = random.Random(3)
    models = [
        GpuModel.objects.create(name="H100-SXM-80GB", memory_mib=81559),
        GpuModel.objects.create(name="A100-SXM4-80GB", memory_mib=81920),
    ]
    nodes = Node.objects.bulk_create(Node(hostname=f"bench-{i:03d}") for i in range(NODES))
    gpus = Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-{node.hostname}-{i}", model=models[n % 2])
        for n, node in enumerate(nodes)
        for i in range(PER_NODE)
    )
    teams = Team.objects.bulk_create(
        Team(slug=f"team{i}", name=f"Team {i}", cost_center=f"CC-{i}") for i in range(TEAMS)
    )
    admin = User.objects.create_user("bench-admin", global_role="platform_admin")
    first = now.replace(minute=0, second=0, microsecond=0) - timedelta(days=DAYS)
    hours = DAYS * 24
    idle_rows = []
    buffer = io.StringIO()
    held: dict[tuple, list[int]] = {}  # (team, block, model) -> GPU ids
    for gpu in gpus:
        # Each GPU is held in 12-hour blocks by a team or by nobody, busy most of the time held.
        for block in range(0, hours, 12):
            team = rng.choice([*teams, None, None])
            if team is not None:
                held.setdefault((team.pk, block, gpu.model_id), []).append(gpu.pk)
            for h in range(block, min(block + 12, hours)):
                bucket = first + timedelta(hours=h)
                busy = team is not None and rng.random() < 0.8
                util = rng.uniform(40, 99) if busy else rng.uniform(0, 2)
                buffer.write(
                    f"{gpu.pk}\t{bucket.isoformat()}\t{team.pk if team else NULL}\t360\t"
                    f"{util:.2f}\t{int(util)}\t40000\t60000\t{70 + 4 * util:.1f}\t"
                    f"{(70 + 4 * util) * 3600:.0f}\t{3600 if busy else 0}\n"
                )
            if team is None or rng.random() < 0.3:
                kind = "unallocated" if team is None else "held_idle"
                start = first + timedelta(hours=block)
                idle_rows.append(
                    f"{gpu.pk}\t{kind}\t{team.pk if team else NULL}\t{start.isoformat()}\t"
                    f"{(start + timedelta(hours=rng.randint(1, 12))).isoformat()}\n"
                )
    bookings = Reservation.objects.bulk_create(
        Reservation(
            team_id=team_id, created_by=admin, gpu_model_id=model_id, count=len(ids),
            start=first + timedelta(hours=block), end=first + timedelta(hours=block + 12),
            status=ReservationStatus.COMPLETED,
        )
        for (team_id, block, model_id), ids in held.items()
    )  # fmt: skip
    holdings = io.StringIO()
    for booking, ids in zip(bookings, held.values(), strict=True):
        for gpu_id in ids:
            holdings.write(
                f"{booking.pk}\t{gpu_id}\t{booking.start.isoformat()}\t"
                f"{booking.end.isoformat()}\tt\n"
            )
    with connection.cursor() as cursor:
        raw = cursor.connection
        with raw.cursor().copy(
            'COPY reservations_reservationgpu (reservation_id, gpu_id, start, "end", active) '
            "FROM STDIN"
        ) as copy:
            copy.write(holdings.getvalue())
        with raw.cursor().copy(
            f"COPY telemetry_gpuhourrollup ({ROLLUP_COLUMNS}) FROM STDIN"
        ) as copy:
            copy.write(buffer.getvalue())
        with raw.cursor().copy(
            'COPY telemetry_idleinterval (gpu_id, kind, team_id, start, "end") FROM STDIN'
        ) as copy:
            copy.write("".join(idle_rows))
        cursor.execute("ANALYZE")
    return first


def timed(fn) -> tuple[float, object]:
    samples, result = [], None
    for _ in range(RUNS):
        started = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), result


def main() -> None:
    from django.test import Client

    from apps.reservations.models import ReservationGpu
    from apps.teams.models import User
    from apps.telemetry.models import GpuHourRollup, IdleInterval

    print("bench/dashboards.py: 30-day dashboard endpoints on 1,000 GPUs")
    recreate_database()
    now = timezone.now()
    started = time.perf_counter()
    first = seed(now)
    print(
        f"seeded {GpuHourRollup.objects.count():,} hour rollups and "
        f"{IdleInterval.objects.count():,} idle intervals, {ReservationGpu.objects.count():,} GPU "
        f"holdings in {time.perf_counter() - started:.1f} s"
    )
    from apps.efficiency.services import allocation_summaries_update

    # What beat's efficiency.summarize keeps up to date as bookings end.
    started = time.perf_counter()
    summed = allocation_summaries_update(since=first - timedelta(days=1), now=now)
    print(
        f"summed the efficiency of {summed['bookings']:,} ended bookings in "
        f"{time.perf_counter() - started:.1f} s"
    )
    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.get(username="bench-admin"))

    def raw_fetch():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT bucket, team_id, busy_seconds FROM telemetry_gpuhourrollup "
                "WHERE bucket >= %s AND bucket < %s",
                [first, now],
            )
            return cursor.fetchall()

    baseline_ms, rows = timed(raw_fetch)
    print(f"baseline  raw fetch of {len(rows):,} rollup rows: {baseline_ms:8.1f} ms")

    def raw_efficiency():
        # What the advice sums: each booking GPU's rollups inside its holding, in one GROUP BY.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT h.reservation_id, h.gpu_id, count(*), sum(r.busy_seconds), "
                "avg(r.util_avg), max(r.mem_used_max_mib) FROM reservations_reservationgpu h "
                "JOIN telemetry_gpuhourrollup r ON r.gpu_id = h.gpu_id AND r.bucket >= h.start "
                'AND r.bucket < h."end" WHERE h.active AND h."end" > %s AND h.start < %s '
                "GROUP BY 1, 2",
                [now - timedelta(days=30), now],
            )
            return cursor.fetchall()

    efficiency_ms, groups = timed(raw_efficiency)
    print(f"baseline  raw SQL sum of {len(groups):,} booking GPUs: {efficiency_ms:8.1f} ms")
    failed = False
    urls = [f"/api/v1/dashboards/{endpoint}/?range=30d" for endpoint in ("utilization", "idle")]
    # Right-sizing advice over the default 30 days: every booking's GPUs against their rollups.
    urls.append("/api/v1/efficiency/advice/")
    for url in urls:
        ms, response = timed(lambda url=url: client.get(url))
        assert response.status_code == 200, response.content[:500]
        size = len(response.content)
        ok = ms < TARGET_MS and size < TARGET_BYTES
        failed |= not ok
        print(
            f"portal    {url}: {ms:8.1f} ms, {size / 1024:7.1f} kB JSON, "
            f"{ms / (efficiency_ms if 'efficiency' in url else baseline_ms):5.2f}x the raw "
            f"{'SQL sum' if 'efficiency' in url else 'fetch'}  "
            f"[target < {TARGET_MS} ms, < 1 MB: {'ok' if ok else 'MISSED'}]"
        )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
