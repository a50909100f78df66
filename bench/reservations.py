"""Reservations benchmarks, each beside a baseline measured in the same run.

(a) availability search: 1,000 GPUs, 20,000 bookings; the portal's search vs one raw SQL query
    that computes the same earliest slot, and vs the search it replaced (every holding loaded
    into Python; tests/reservations/loaded_search.py), run in turn. Target: under 50 ms per
    query.
(b) booking throughput through the real API (gunicorn, PostgreSQL, 16 concurrent clients) vs a
    bare Django view doing one INSERT. Target: at least 100 bookings/s on 2 cores.

Run: .venv/bin/python bench/reservations.py [--gpus N] [--skip-http]
--gpus: the fleet's size (default 1,000); bookings scale with it (20 per GPU).
Uses the PostgreSQL database in DATABASE_URL (default portal_bench, created and rebuilt).
"""

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.common import recreate_database  # noqa: E402

GPUS, BOOKINGS_PER_GPU, HTTP_CLIENTS = 1000, 20, 16
BOOKINGS = GPUS * BOOKINGS_PER_GPU


def build_fleet_and_bookings(now):
    from apps.fleet.models import Gpu, GpuModel, Node
    from apps.reservations.models import Reservation, ReservationGpu
    from apps.teams.models import Membership, Quota, Team, User

    rng = random.Random(42)
    model = GpuModel.objects.create(name="H100-SXM-80GB", memory_mib=81559)
    nodes = Node.objects.bulk_create(Node(hostname=f"node-{i:04d}") for i in range(GPUS // 8))
    gpus = Gpu.objects.bulk_create(
        Gpu(
            node=node,
            index=i,
            uuid=f"GPU-{node.hostname}-{i}",
            model=model,
            nvlink_domain=f"{node.hostname}/nvl0",
        )
        for node in nodes
        for i in range(8)
    )
    team = Team.objects.create(slug="bench", name="Bench")
    user = User.objects.create(username="bench")
    user.set_password("bench")
    user.save()
    Membership.objects.create(team=team, user=user)
    Quota.objects.create(team=team, gpu_model=model, guaranteed=GPUS, limit=GPUS)
    slot = timedelta(minutes=15)
    start0 = now.replace(minute=0, second=0, microsecond=0)
    reservations, holdings = [], []
    per_gpu = BOOKINGS // GPUS
    for gpu in gpus:
        cursor = start0 + rng.randrange(0, 8) * slot
        for _ in range(per_gpu):
            length = rng.randrange(4, 96) * slot  # 1 h to 24 h
            reservations.append(
                Reservation(
                    team=team,
                    created_by=user,
                    gpu_model=model,
                    count=1,
                    start=cursor,
                    end=cursor + length,
                    status="scheduled",
                )
            )
            holdings.append((gpu.id, cursor, cursor + length))
            cursor += length + rng.randrange(0, 12) * slot  # gaps up to 3 h
    created = Reservation.objects.bulk_create(reservations, batch_size=5000)
    ReservationGpu.objects.bulk_create(
        (
            ReservationGpu(reservation=r, gpu_id=g, start=s, end=e)
            for r, (g, s, e) in zip(created, holdings, strict=True)
        ),
        batch_size=5000,
    )
    connection.cursor().execute("ANALYZE")
    return model, team, user


RAW_EARLIEST_SLOT = """
WITH gpus AS (
    SELECT g.id FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id
    WHERE g.model_id = %(model)s AND g.mig_parent_id IS NULL AND g.status = 'active'
      AND g.health = 'healthy' AND n.status = 'up'
), candidates AS (
    SELECT %(after)s::timestamptz AS t
    UNION
    SELECT DISTINCT h."end" FROM reservations_reservationgpu h
    WHERE h.active AND h.gpu_id IN (SELECT id FROM gpus)
      AND h."end" > %(after)s AND h."end" <= %(horizon)s
)
SELECT c.t FROM candidates c
WHERE (SELECT count(*) FROM gpus g WHERE NOT EXISTS (
          SELECT 1 FROM reservations_reservationgpu h
          WHERE h.gpu_id = g.id AND h.active AND h.start < c.t + %(duration)s AND h."end" > c.t
      )) >= %(count)s
ORDER BY c.t LIMIT 1
"""


def timed(fn, repeat):
    samples = []
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - t0)
    return result, statistics.median(samples), samples


def bench_availability(model, now):
    from apps.reservations import selectors
    from apps.reservations.availability import ceil_to_grid, from_epoch, to_epoch
    from tests.reservations.loaded_search import loaded_search

    slot = timedelta(minutes=15)
    after = from_epoch(ceil_to_grid(to_epoch(now), 900))
    horizon = now + timedelta(days=30)
    print(f"\n(a) availability search, {GPUS} GPUs, {BOOKINGS} bookings")
    print(
        f"{'query':20} {'portal ms':>10} {'before ms':>10} {'raw SQL ms':>11} "
        f"{'ratio':>7} {'before/now':>10}  same answer"
    )
    for count, hours in ((1, 1), (8, 4), (64, 8), (200, 12)):
        duration = timedelta(hours=hours)

        def portal(count=count, duration=duration):
            slots = selectors.availability_search(
                gpu_model=model,
                count=count,
                duration=duration,
                after=after,
                horizon=horizon,
                slot=slot,
                limit=5,
            )
            return slots[0].start if slots else None

        def raw(count=count, duration=duration):
            with connection.cursor() as cursor:
                cursor.execute(
                    RAW_EARLIEST_SLOT,
                    {
                        "model": model.id,
                        "after": after,
                        "horizon": horizon,
                        "duration": duration,
                        "count": count,
                    },
                )
                row = cursor.fetchone()
            return row[0] if row else None

        def before(count=count, duration=duration):
            slots = loaded_search(
                gpu_model=model,
                count=count,
                duration=duration,
                after=after,
                horizon=horizon,
                slot=slot,
                limit=5,
            )
            return slots[0][0] if slots else None

        portal()  # warm caches
        before()
        # In turn, so that a busy machine slows both alike.
        ours_samples, before_samples = [], []
        for _ in range(7):
            ours, seconds, _ = timed(portal, 1)
            ours_samples.append(seconds)
            old, seconds, _ = timed(before, 1)
            before_samples.append(seconds)
        ours_s, before_s = statistics.median(ours_samples), statistics.median(before_samples)
        theirs, raw_s, _ = timed(raw, 3)
        same = (
            ours is not None
            and theirs is not None
            and ours == old == from_epoch(ceil_to_grid(to_epoch(theirs), 900))
        )
        label = f"{count} GPUs x {hours} h"
        print(
            f"{label:20} {ours_s * 1000:10.1f} {before_s * 1000:10.1f} {raw_s * 1000:11.1f} "
            f"{ours_s / raw_s:7.2f} {before_s / ours_s:10.2f}  "
            f"{'yes' if same else f'NO ({ours} / {old} vs {theirs})'}"
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_clients(url, make_body, headers_per_client, total):
    import requests

    latencies, statuses = [], {}
    lock = threading.Lock()
    counter = iter(range(total))

    def worker(headers):
        session = requests.Session()
        session.headers.update(headers)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t0 = time.perf_counter()
            body = make_body(i)
            if "team" in body:
                body["team"] = headers["X-Team"]
            response = session.post(url, json=body, timeout=30)
            elapsed = time.perf_counter() - t0
            with lock:
                latencies.append(elapsed)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    threads = [threading.Thread(target=worker, args=(h,)) for h in headers_per_client]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    latencies.sort()
    return {
        "rate": total / wall,
        "p50": latencies[len(latencies) // 2] * 1000,
        "p95": latencies[int(len(latencies) * 0.95)] * 1000,
        "statuses": statuses,
    }


def bench_http(model, now, total=1200):
    from rest_framework.authtoken.models import Token

    from apps.teams.models import Membership, Quota, Team, User

    # One team and user per client, as many teams booking at once would.
    tokens = []
    for i in range(HTTP_CLIENTS):
        team = Team.objects.create(slug=f"client-{i}", name=f"Client {i}")
        user = User.objects.create(username=f"client-{i}")
        Membership.objects.create(team=team, user=user)
        Quota.objects.create(team=team, gpu_model=model, guaranteed=0, limit=GPUS)
        tokens.append(Token.objects.create(user=user).key)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_bare_insert (id bigserial PRIMARY KEY, payload text)"
        )
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings", "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "bench.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "4",
            "--threads",
            "4",
            "--worker-class",
            "gthread",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        import requests

        for _ in range(100):
            try:
                requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                break
            except requests.RequestException:
                time.sleep(0.2)
        slot = timedelta(minutes=15)
        base = (now + timedelta(days=31)).replace(minute=0, second=0, microsecond=0)

        # Beyond the seeded bookings: each request books 1 GPU for 15 minutes in its own slot
        # of 1000 GPUs, so no request fails for lack of capacity.
        def booking(i):
            start = base - timedelta(days=2) + (i // 900) * slot
            return {
                "team": None,  # filled in with the client's own team
                "gpu_model": "H100-SXM-80GB",
                "count": 1,
                "start": start.isoformat(),
                "duration": "00:15:00",
            }

        headers = [
            {"Authorization": f"Token {key}", "X-Team": f"client-{i}"}
            for i, key in enumerate(tokens)
        ]
        print(
            f"\n(b) booking throughput, {HTTP_CLIENTS} concurrent clients, {total} requests, "
            "gunicorn 3 workers x 4 threads"
        )
        server_url = f"http://127.0.0.1:{port}"
        ours = run_clients(f"{server_url}/api/v1/reservations/", booking, headers, total)
        bare = run_clients(f"{server_url}/bench/bare-insert/", lambda i: {"i": i}, headers, total)
        print(f"{'endpoint':28} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8}  statuses")
        for label, result in (
            ("POST /api/v1/reservations/", ours),
            ("bare view, one INSERT", bare),
        ):
            print(
                f"{label:28} {result['rate']:8.1f} {result['p50']:8.1f} {result['p95']:8.1f}  "
                f"{result['statuses']}"
            )
        print(f"ratio (portal / bare) throughput: {ours['rate'] / bare['rate']:.2f}")
    finally:
        server.terminate()
        server.wait(timeout=20)


def main():
    global GPUS, BOOKINGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=GPUS, help="fleet size (multiple of 8)")
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    if args.gpus < 8 or args.gpus % 8:
        parser.error("--gpus must be a positive multiple of 8 (whole nodes of 8 GPUs)")
    GPUS, BOOKINGS = args.gpus, args.gpus * BOOKINGS_PER_GPU
    recreate_database()
    now = timezone.now()
    t0 = time.perf_counter()
    model, _team, _user = build_fleet_and_bookings(now)
    print(f"built {GPUS} GPUs and {BOOKINGS} bookings in {time.perf_counter() - t0:.1f} s")
    bench_availability(model, now)
    if not args.skip_http:
        bench_http(model, now)


if __name__ == "__main__":
    main()
