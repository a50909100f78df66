"""Dashboard endpoints on a month of fleet history, beside raw SQL aggregates of the same rows.

Seeds 1,000 GPUs (125 nodes x 8, two models: the H100s with GPM SM activity) and 30 days of
hour rollups (720,000 rows, held by 8 teams in turn, loaded with COPY), their (hour, team, GPU
model) sums (written as rollup_hours writes them with the hour rollups), the bookings that hold
them (~48,000 GPU holdings in 12-hour blocks: the utilization chart counts allocated GPUs from
these), plus idle intervals (~30 per GPU) and their hourly sums (written as the minutely idle update
writes them). Then times, as a platform admin through Django's test client (the whole view:
filters, SQL, figure building, JSON), the 30-day utilization, idle and occupancy endpoints and
the right-sizing advice, and reports their JSON size; the idle endpoint also as it was before
the hourly sums (its idle hours from the intervals alone). The baselines, in the
same run: one raw SQL aggregate of the same per-GPU rows each endpoint summarises (busy seconds
and utilization per hour, team and model from the hour rollups; idle hours per day, kind and
team from the idle intervals; the bookings holding GPUs in the window, with GPU, node and team,
as many as the chart takes; for the advice, each booking GPU's rollups inside its holding in
one GROUP BY), without figures or JSON.
Targets: each endpoint < 300 ms (median of 5) and < 1 MB.

Run: .venv/bin/python bench/dashboards.py [--gpus 1000] [--reuse]
(bench/scale.py runs it at 10,000). Uses its own PostgreSQL database (portal_bench_dashboards,
dropped and rebuilt; BENCH_DASHBOARDS_DATABASE_URL to change); --reuse keeps a database seeded
for the same --gpus by an earlier run (migrated to the current code), as seeding 10,000 GPUs
takes many minutes.
"""

import argparse
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
os.environ["DATABASE_URL"] = os.environ.get(
    "BENCH_DASHBOARDS_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal_bench_dashboards"
)
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
    "power_avg_w, energy_j, busy_seconds, sm_active_avg"
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
                sm = f"{util * 0.7:.2f}" if gpu.model_id == models[0].pk else NULL
                buffer.write(
                    f"{gpu.pk}\t{bucket.isoformat()}\t{team.pk if team else NULL}\t360\t"
                    f"{util:.2f}\t{int(util)}\t40000\t60000\t{70 + 4 * util:.1f}\t"
                    f"{(70 + 4 * util) * 3600:.0f}\t{3600 if busy else 0}\t{sm}\n"
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
                f"{booking.end.isoformat()}\tt\t\tf\tf\n"
            )
    with connection.cursor() as cursor:
        raw = cursor.connection
        with raw.cursor().copy(
            "COPY reservations_reservationgpu "
            '(reservation_id, gpu_id, start, "end", active, change_reason, stranded, over_quota) '
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
    from apps.telemetry.rollups import rollup_team_models

    started = time.perf_counter()
    rollup_team_models(start=first, end=now)
    summed_ms = (time.perf_counter() - started) * 1000
    idle_sums(first, now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return first, summed_ms


def idle_sums(first, now) -> None:
    from apps.telemetry.idle import idle_hours_rollup

    started = time.perf_counter()
    written = idle_hours_rollup(start=first - timedelta(days=1), end=now)
    print(
        f"{written:,} hourly idle sums written in {time.perf_counter() - started:.1f} s "
        "(the minutely idle update rewrites one hour's)"
    )


def seeded(gpus: int) -> bool:
    """Whether the database holds a fleet of `gpus` GPUs seeded by an earlier run."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    try:
        with psycopg.connect(
            host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
            dbname=db["NAME"],
        ) as conn:  # fmt: skip
            found = conn.execute(
                "SELECT count(*), (SELECT count(*) FROM telemetry_idleinterval) FROM fleet_gpu"
            ).fetchone()
    except psycopg.Error:
        return False
    return found[0] == gpus and found[1] > 0


def timed(fn) -> tuple[float, object]:
    samples, result = [], None
    for _ in range(RUNS):
        started = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), result


UTILIZATION_SQL = """
SELECT h.bucket, h.team_id, g.model_id, sum(h.busy_seconds), sum(h.util_avg), count(h.util_avg)
FROM telemetry_gpuhourrollup h JOIN fleet_gpu g ON g.id = h.gpu_id
WHERE h.bucket >= %(start)s AND h.bucket < %(end)s
GROUP BY h.bucket, h.team_id, g.model_id
"""
EFFICIENCY_SQL = """
SELECT h.reservation_id, h.gpu_id, count(*), sum(r.busy_seconds), avg(r.util_avg),
       max(r.mem_used_max_mib)
FROM reservations_reservationgpu h
JOIN telemetry_gpuhourrollup r ON r.gpu_id = h.gpu_id AND r.bucket >= h.start
     AND r.bucket < h."end"
WHERE h.active AND h."end" > %(start)s AND h.start < %(end)s
GROUP BY 1, 2
"""
OCCUPANCY_SQL = """
SELECT h.id, h.start, h."end", g."index", n.hostname, t.slug, h.reservation_id
FROM reservations_reservationgpu h
JOIN reservations_reservation r ON r.id = h.reservation_id
JOIN teams_team t ON t.id = r.team_id
JOIN fleet_gpu g ON g.id = h.gpu_id JOIN fleet_node n ON n.id = g.node_id
WHERE h.active AND h.start < %(end)s AND h."end" > %(start)s
LIMIT 5000
"""
IDLE_SQL = """
SELECT date_trunc('day', d.t), i.kind, i.team_id,
       sum(extract(epoch FROM least(i."end", d.t + interval '1 day', %(end)s)
                              - greatest(i.start, d.t, %(start)s))) / 3600
FROM generate_series(date_trunc('day', %(start)s::timestamptz), %(end)s, interval '1 day') d(t)
JOIN telemetry_idleinterval i ON i.start < d.t + interval '1 day' AND i."end" > d.t
WHERE i.start < %(end)s AND i."end" > %(start)s
GROUP BY 1, 2, 3
"""


def main() -> None:
    global NODES
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=NODES * PER_NODE, help="8 per node")
    parser.add_argument(
        "--reuse", action="store_true", help="keep a database seeded for the same --gpus"
    )
    args = parser.parse_args()
    NODES = args.gpus // PER_NODE
    from django.test import Client

    from apps.dashboards.selectors import idle as idle_selectors
    from apps.efficiency.services import allocation_summaries_update
    from apps.reservations.models import ReservationGpu
    from apps.teams.models import User
    from apps.telemetry.models import GpuHourRollup, IdleInterval, TeamModelHourRollup
    from apps.telemetry.selectors import idle_hours_by_step

    print(f"bench/dashboards.py: 30-day dashboard endpoints on {NODES * PER_NODE:,} GPUs")
    now = timezone.now()
    if args.reuse and seeded(NODES * PER_NODE):
        from django.core.management import call_command

        started = time.perf_counter()
        call_command("migrate", verbosity=0)
        print(f"reused the seeded database (migrated in {time.perf_counter() - started:.1f} s)")
    else:
        recreate_database()
        started = time.perf_counter()
        first, summed_ms = seed(now)
        print(
            f"seeded {GpuHourRollup.objects.count():,} hour rollups and "
            f"{IdleInterval.objects.count():,} idle intervals, {ReservationGpu.objects.count():,} "
            f"GPU holdings in {time.perf_counter() - started:.1f} s; "
            f"{TeamModelHourRollup.objects.count():,} (hour, team, model) sums written in "
            f"{summed_ms:.0f} ms"
        )
        # What beat's efficiency.summarize keeps up to date as bookings end.
        started = time.perf_counter()
        summed = allocation_summaries_update(since=first - timedelta(days=1), now=now)
        print(
            f"summed the efficiency of {summed['bookings']:,} ended bookings in "
            f"{time.perf_counter() - started:.1f} s"
        )
    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.get(username="bench-admin"))

    def raw(sql):
        def run():
            with connection.cursor() as cursor:
                cursor.execute(sql, {"start": now - timedelta(days=DAYS), "end": now})
                return cursor.fetchall()

        return run

    def intervals_only(**kwargs):
        return idle_hours_by_step(presummed=False, **kwargs)

    endpoints = [
        ("utilization", "/api/v1/dashboards/utilization/?range=30d", UTILIZATION_SQL, None),
        ("idle", "/api/v1/dashboards/idle/?range=30d", IDLE_SQL, None),
        # as it was: idle hours from clipping every interval of the month to the days
        ("idle (before the hourly sums)", "/api/v1/dashboards/idle/?range=30d", IDLE_SQL,
         intervals_only),
        ("occupancy", "/api/v1/dashboards/occupancy/?range=30d", OCCUPANCY_SQL, None),
        # right-sizing advice over its default 30 days: every booking's GPUs and their rollups
        ("efficiency advice", "/api/v1/efficiency/advice/", EFFICIENCY_SQL, None),
    ]  # fmt: skip
    failed = False
    for name, url, sql, idle_path in endpoints:
        baseline_ms, rows = timed(raw(sql))
        idle_selectors.idle_hours_by_step = idle_path or idle_hours_by_step
        ms, response = timed(lambda url=url: client.get(url))
        idle_selectors.idle_hours_by_step = idle_hours_by_step
        assert response.status_code == 200, response.content[:500]
        size = len(response.content)
        ok = ms < TARGET_MS and size < TARGET_BYTES
        failed |= not ok and idle_path is None
        print(
            f"baseline  {name}: raw SQL aggregate of the same rows, {len(rows):,} groups: "
            f"{baseline_ms:8.1f} ms"
        )
        print(
            f"portal    {url}: {ms:8.1f} ms, {size / 1024:7.1f} kB JSON, "
            f"{ms / baseline_ms:5.2f}x the raw SQL aggregate  "
            f"[target < {TARGET_MS} ms, < 1 MB: {'ok' if ok else 'MISSED'}]"
        )  # fmt: skip
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
