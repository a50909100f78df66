"""Reservations benchmarks, each beside a baseline measured in the same run.

(a) availability search: 1,000 GPUs, 20,000 bookings; the portal's search vs one raw SQL query
    that computes the same earliest slot, and vs the search it replaced (every holding loaded
    into Python; tests/reservations/loaded_search.py), run in turn. Target: under 50 ms per
    query.
(b) booking throughput through the real API (gunicorn, PostgreSQL, 16 concurrent clients, each
    its own team with a named API token) vs a bare Django view doing one INSERT. Target: at
    least 0.3x the bare view's throughput, p95 under 100 ms. The server runs as gunicorn
    advises for its default sync workers (2 per core plus one); --workers and --threads
    (gthread) change it. Threads share a process's interpreter lock: a booking holding the
    model's picking lock waits for the lock's release behind its process's other requests.
(c) with --profile N: N bookings and N bare-view requests in this process through the whole
    stack (middleware, DRF, the service), CPU per request of each (the measure a loaded
    machine sways least), the queries of one booking, then the bookings under cProfile by
    stage (authentication, throttle, input, the transaction and its parts, reply).

Run: .venv/bin/python bench/reservations.py [--gpus N] [--skip-search] [--skip-http]
        [--profile N] [--requests N] [--workers N] [--threads N]
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
    # As autovacuum leaves a table after bulk inserts: statistics and the visibility map (which
    # lets index-only scans skip the table).
    connection.cursor().execute("VACUUM ANALYZE")
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


def make_clients(model):
    """One team, user and API token per client, as many teams booking at once would; and the
    bare view's table. Returns the clients' headers."""
    from apps.teams.choices import ApiTokenScope
    from apps.teams.models import Membership, Quota, Team, User
    from apps.teams.tokens import api_token_create

    headers = []
    for i in range(HTTP_CLIENTS):
        team = Team.objects.create(slug=f"client-{i}", name=f"Client {i}")
        user = User.objects.create(username=f"client-{i}")
        Membership.objects.create(team=team, user=user)
        Quota.objects.create(team=team, gpu_model=model, guaranteed=0, limit=GPUS)
        _, key = api_token_create(
            user=user, name="bench", scope=ApiTokenScope.READ_WRITE, expires_in_days=7
        )
        headers.append({"Authorization": f"Token {key}", "X-Team": team.slug})
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_bare_insert (id bigserial PRIMARY KEY, payload text)"
        )
    return headers


def booking_body(base):
    """The i-th request's booking: 1 GPU for 15 minutes, 900 requests per slot of the 1,000
    GPUs from `base` on, so that no request fails for lack of capacity."""
    slot = timedelta(minutes=15)

    def body(i):
        return {
            "team": None,  # filled in with the client's own team
            "gpu_model": "H100-SXM-80GB",
            "count": 1,
            "start": (base + (i // 900) * slot).isoformat(),
            "duration": "00:15:00",
        }

    return body


# Where a booking request's time goes, in the order a request passes them: (label, function);
# each stage's time is its function's cumulative time in the profile, less the stages inside it.
PROFILE_STAGES = (
    ("whole request", "django/core/handlers/base.py", "get_response"),
    ("  DRF dispatch", "rest_framework/views.py", "dispatch"),
    ("    authentication", "rest_framework/views.py", "perform_authentication"),
    ("    throttle", "rest_framework/views.py", "check_throttles"),
    ("    input serializer", "rest_framework/serializers.py", "is_valid"),
    ("    reservation_create", "apps/reservations/booking.py", "reservation_create"),
    ("      transaction (_book)", "apps/reservations/booking.py", "_book"),
    ("        quota check", "apps/reservations/booking.py", "check_quota"),
    ("        budget check", "apps/reservations/policy.py", "budget_check"),
    ("        free GPUs' SQL", "apps/reservations/picking.py", "of"),
    ("        pick and hold", "apps/reservations/picking.py", "hold_on_best_fitting_node"),
    ("    reply figures", "apps/reservations/selectors/bookings.py", "with_figures"),
    ("    reply serializer", "rest_framework/serializers.py", "data"),
    ("  rendering", "rest_framework/response.py", "rendered_content"),
    ("  database calls", "django/db/backends/utils.py", "_execute"),
)


def bench_profile(headers, base, total):
    """`total` bookings in this process through the whole stack (middleware, DRF, the
    service; no HTTP server), the bare view's request beside them: CPU per request of each,
    then the bookings once more under cProfile, by stage."""
    import cProfile
    import json
    import pstats

    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    body = booking_body(base)
    clients = [
        Client(HTTP_AUTHORIZATION=h["Authorization"], HTTP_HOST="127.0.0.1") for h in headers
    ]

    def book(i):
        data = {**body(i), "team": headers[i % len(headers)]["X-Team"]}
        response = clients[i % len(clients)].post(
            "/api/v1/reservations/", json.dumps(data), content_type="application/json"
        )
        assert response.status_code == 201, response.content

    def bare(i):
        response = clients[i % len(clients)].post(
            "/bench/bare-insert/", json.dumps({"i": i}), content_type="application/json"
        )
        assert response.status_code == 201, response.content

    for i in range(len(clients)):  # warm up: connections, caches, imports
        book(i)
        bare(i)
    with CaptureQueriesContext(connection) as captured:
        book(len(clients))
    print(f"\n(c) one booking in process: {len(captured.captured_queries)} queries")
    for query in captured.captured_queries:
        print(f"    {query['sql'][:110]}")
    done = len(clients) + 1
    print(f"{'path':28} {'CPU ms':>8} {'wall ms':>8}  ({total} requests, no profiler)")
    for label, fn in (("POST /api/v1/reservations/", book), ("bare view, one INSERT", bare)):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(done, done + total):
            fn(i)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        print(f"{label:28} {cpu * 1000 / total:8.2f} {wall * 1000 / total:8.2f}")
    done += total
    profile = cProfile.Profile(time.process_time)
    profile.runcall(lambda: [book(i) for i in range(done, done + total)])
    stats = pstats.Stats(profile).stats
    print("\nunder cProfile (CPU time, inflated by the profiler), per booking:")
    for label, path, name in PROFILE_STAGES:
        cumulative = sum(
            cum
            for (file, _, func), (_, _, _, cum, _) in stats.items()
            if func == name and file.endswith(path)
        )
        print(f"{label:30} {cumulative * 1000 / total:8.2f} ms")
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)


def bench_http(headers, base, total, workers, threads):
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings", "PYTHONPATH": str(ROOT)}
    server_options = ["--workers", str(workers)]
    if threads > 1:
        server_options += ["--threads", str(threads), "--worker-class", "gthread"]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "bench.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            *server_options,
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
        server_kind = f"{workers} workers" + (f" x {threads} threads" if threads > 1 else "")
        print(
            f"\n(b) booking throughput, {HTTP_CLIENTS} concurrent clients, {total} requests, "
            f"gunicorn {server_kind}, load average {os.getloadavg()[0]:.1f}"
        )
        server_url = f"http://127.0.0.1:{port}"
        ours = run_clients(f"{server_url}/api/v1/reservations/", booking_body(base), headers, total)
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
    parser.add_argument("--skip-search", action="store_true", help="no part (a)")
    parser.add_argument("--skip-http", action="store_true", help="no part (b)")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="part (c) with N bookings"
    )
    parser.add_argument("--requests", type=int, default=1200, help="part (b)'s requests")
    # gunicorn's advice for its default (sync) workers: 2 per core plus one.
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1) + 1)
    parser.add_argument("--threads", type=int, default=1, help="over 1: gthread workers")
    args = parser.parse_args()
    if args.gpus < 8 or args.gpus % 8:
        parser.error("--gpus must be a positive multiple of 8 (whole nodes of 8 GPUs)")
    GPUS, BOOKINGS = args.gpus, args.gpus * BOOKINGS_PER_GPU
    recreate_database()
    now = timezone.now()
    t0 = time.perf_counter()
    model, _team, _user = build_fleet_and_bookings(now)
    print(f"built {GPUS} GPUs and {BOOKINGS} bookings in {time.perf_counter() - t0:.1f} s")
    if not args.skip_search:
        bench_availability(model, now)
    headers = make_clients(model)
    # Beyond the seeded bookings, each part in its own days.
    base = (now + timedelta(days=29)).replace(minute=0, second=0, microsecond=0)
    if args.profile:
        bench_profile(headers, base - timedelta(days=4), args.profile)
    if not args.skip_http:
        bench_http(headers, base, args.requests, args.workers, args.threads)


if __name__ == "__main__":
    main()
