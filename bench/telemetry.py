"""Telemetry benchmarks, each beside a baseline measured in the same run.

(a) ingest throughput: 10,000 GPUs (1,250 nodes x 8), 4 polls 15 s apart = 40,000 samples sent
    as agent batches (one per node) through telemetry_ingest, vs a raw psycopg COPY of the same
    rows into the same table. Also the duplicate path (COPY meets duplicates, falls back to
    staging + ON CONFLICT). Targets: >= 50,000 samples/s and ratio >= 0.5.
(b) end-to-end lag: 1,000 simulated GPUs (125 nodes x 8) polled every 15 s through real Redis
    into a real portal Celery worker (solo pool) and PostgreSQL, vs the lag of the same poll's
    batches ingested in-process (no broker). Target: p95 < 5 s.
(d) queue drain: 2,000 agent batches (250 nodes x 8 polls) queued on Redis, taken by the
    portal's loss-free drain (LMOVE into a registered processing list) vs kombu's own consumer
    (`basic_get` + ack, the earlier path, which can lose a batch to a SIGKILL), both storing the
    same batches through telemetry_ingest_many. Shows what crash safety costs.
(e) big backlog: max-size batches (10,000 samples each; --backlog of them, 40 by default) queued
    on Redis, drained run after run by telemetry_drain with its sample budget
    (TELEMETRY_DRAIN_MAX_SAMPLES) until the queue is empty, vs one raw psycopg COPY of the same
    rows. Prints samples/s of both, their ratio, the longest run, and what that rate means for
    the largest backlog agents can leave (2,000 batches of 10,000): runs and seconds per run,
    against the drain task's 60 s hard limit.
(c) rollups: one hour of raw samples of 1,000 GPUs at 15 s (240,000 rows), rollup_minutes and
    rollup_hours vs one plain GROUP BY (gpu_id, minute) over the same rows, in wall seconds and
    CPU seconds of the database backend that ran each (PostgreSQL on this machine). Target: < 5 s.

Run: .venv/bin/python bench/telemetry.py [--only a|b|c|d|e] [--minutes 3] [--backlog 40]
Uses its own PostgreSQL database (portal_bench_telemetry, dropped and rebuilt; --database-url
to change) and its own Redis database (redis://127.0.0.1:6379/13, flushed; --redis-url).

Part (b) runs the fleet as 125 real `workers.agent.agent.Agent` objects (the agent's own class,
SimulatedNvml readers, the agent app's Celery settings) hosted by a few worker processes that
each consume the `node.<hostname>` queues of their nodes; `agent.poll` picks the node's Agent
by the queue the message came from. 125 separate `python -m workers.agent` processes (~60 MB
and a Celery worker each) do not fit a 2-core machine, while 5 processes of 200 GPUs each
would send 5 big batches instead of the 125 small ones a real fleet sends: the portal's cost
is per batch as much as per sample (see part a). `--agent-mode processes` runs the plain
`python -m workers.agent` processes (--agent-procs of them, GPUs split between them) instead.
"""

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/portal_bench_telemetry"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/13"
POLL_SECONDS = 15
GPU_MODEL = "H100-SXM-80GB"
MEMORY_MIB = 81559
COLUMNS = (
    "gpu_id",
    "ts",
    "util_gpu",
    "util_mem",
    "mem_used_mib",
    "power_w",
    "temp_c",
    "energy_mj",
)
COPY_SQL = f"COPY telemetry_gpusample ({', '.join(COLUMNS)}) FROM STDIN"


# --- helpers ---------------------------------------------------------------------------------


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def setup_django(database_url: str, redis_url: str) -> None:
    # Set, not setdefault: bench/settings.py only fills these in when unset, and the
    # database is dropped and rebuilt, so it must never be whatever DATABASE_URL the shell has.
    os.environ["DATABASE_URL"] = database_url
    os.environ["CELERY_BROKER_URL"] = redis_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()


def raw_connection():
    """A psycopg connection of its own (baselines, the lag observer), not Django's."""
    import psycopg

    return psycopg.connect(os.environ["DATABASE_URL"])


def reset_tables() -> None:
    """Empty the fleet, telemetry and bookings: each part starts from a clean database."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE fleet_node, fleet_gpu, fleet_gpumodel, telemetry_gpusample, "
            "telemetry_ingestbatch, telemetry_telemetrycounter, telemetry_gpuminuterollup, "
            "telemetry_gpuhourrollup, reservations_reservation, reservations_reservationgpu, "
            "audit_auditevent RESTART IDENTITY CASCADE"
        )


def truncate_samples() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE telemetry_gpusample, telemetry_ingestbatch, telemetry_telemetrycounter"
        )


def analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def make_fleet(prefix: str, nodes: int, per_node: int) -> list[tuple[str, list[tuple[int, str]]]]:
    """Nodes and GPUs as registration leaves them. Returns [(hostname, [(gpu_id, uuid)])]."""
    from django.utils import timezone

    from apps.fleet.models import Gpu, GpuModel, Node

    model, _ = GpuModel.objects.get_or_create(name=GPU_MODEL, defaults={"memory_mib": MEMORY_MIB})
    now = timezone.now()
    created = Node.objects.bulk_create(
        Node(hostname=f"{prefix}-{i:04d}", last_seen=now) for i in range(nodes)
    )
    gpus = Gpu.objects.bulk_create(
        (
            Gpu(
                node=node,
                index=i,
                uuid=f"GPU-{node.hostname}-{i}",
                model=model,
                nvlink_domain=f"{node.hostname}/nvl0",
            )
            for node in created
            for i in range(per_node)
        ),
        batch_size=5000,
    )
    by_node: dict[str, list[tuple[int, str]]] = {node.hostname: [] for node in created}
    for gpu in gpus:
        by_node[gpu.node.hostname].append((gpu.id, gpu.uuid))
    return list(by_node.items())


def agent_sample(uuid: str, ts: float, util: int, energy_mj: int) -> dict:
    """One sample as the agent's NvmlReader sends it (all of nvml.SAMPLE_KEYS)."""
    return {
        "uuid": uuid,
        "parent_uuid": None,
        "ts": ts,
        "util_gpu": util,
        "util_mem": int(util * 0.6),
        "mem_used_mib": int(MEMORY_MIB * 0.85 * util / 100),
        "mem_total_mib": MEMORY_MIB,
        "power_w": 70.0 + 6.3 * util,
        "temp_c": 30 + int(0.45 * util),
        "energy_mj": energy_mj,
        "ecc_uncorrected": 0,
        "xid": None,
        "health": "healthy",
    }


def make_batches(fleet, ts: float, seq: int, rng: random.Random, energy: dict) -> list[dict]:
    batches = []
    for hostname, gpus in fleet:
        samples = []
        for _gpu_id, uuid in gpus:
            util = rng.randrange(0, 101)
            energy[uuid] = energy.get(uuid, 0) + int((70 + 6.3 * util) * POLL_SECONDS * 1000)
            samples.append(agent_sample(uuid, ts, util, energy[uuid]))
        batches.append({"node": hostname, "seq": seq, "samples": samples, "dropped_batches": 0})
    return batches


def rows_of(batches, gpu_ids: dict) -> list[tuple]:
    """The rows telemetry_ingest stores for these batches, in COLUMNS order."""
    return [
        (
            gpu_ids[s["uuid"]],
            datetime.fromtimestamp(s["ts"], tz=UTC),
            s["util_gpu"],
            s["util_mem"],
            s["mem_used_mib"],
            s["power_w"],
            s["temp_c"],
            s["energy_mj"],
        )
        for batch in batches
        for s in batch["samples"]
    ]


# --- (a) ingest throughput -------------------------------------------------------------------


def bench_ingest(rounds: int = 4, nodes: int = 1250, per_node: int = 8) -> None:
    from django.db import connection

    from apps.telemetry.ingest import telemetry_ingest, telemetry_ingest_many
    from apps.telemetry.models import GpuSample

    reset_tables()
    t0 = time.perf_counter()
    fleet = make_fleet("ingest", nodes, per_node)
    wide_fleet = make_fleet("wide", nodes * per_node // 200, 200)
    analyze()
    gpu_ids = {uuid: pk for _, gpus in fleet + wide_fleet for pk, uuid in gpus}
    rng = random.Random(7)
    start = time.time() - rounds * POLL_SECONDS  # all polls within the accepted range
    energy: dict = {}
    polls = [
        make_batches(fleet, start + r * POLL_SECONDS, r + 1, rng, energy) for r in range(rounds)
    ]
    wide_polls = [
        make_batches(wide_fleet, start + r * POLL_SECONDS, r + 1, rng, energy)
        for r in range(rounds)
    ]
    rows = [rows_of(batches, gpu_ids) for batches in polls]
    total = sum(len(r) for r in rows)
    print(
        f"\n(a) ingest throughput: {nodes * per_node} GPUs ({nodes} nodes x {per_node}), "
        f"{rounds} polls = {total} samples (set up in {time.perf_counter() - t0:.1f} s)"
    )

    statements: dict[str, int] = {}

    def count_statement(execute, sql, params, many, context):
        table = re.search(r'(?:FROM|INTO|UPDATE)\s+"?(\w+)', sql)
        kind = sql.split()[0] + (f" {table.group(1)}" if table else "")
        statements[kind] = statements.get(kind, 0) + 1
        return execute(sql, params, many, context)

    def run_portal(batches_per_poll):
        statements.clear()
        truncate_samples()
        # Warm up: connection, the staging-free COPY path, query plans; then start clean.
        warm = make_batches(fleet[:2], start - POLL_SECONDS, 0, random.Random(0), {})
        telemetry_ingest(batch=warm[0])
        with connection.execute_wrapper(count_statement):  # what one batch costs, warm
            telemetry_ingest(batch=warm[1])
        truncate_samples()
        stored, rejected, per_round = 0, 0, []
        t_all = time.perf_counter()
        for batches in batches_per_poll:
            t_round = time.perf_counter()
            for batch in batches:
                result = telemetry_ingest(batch=batch)
                stored += result.stored
                rejected += sum(result.rejected.values()) + result.duplicate_batch
            per_round.append(time.perf_counter() - t_round)
        return time.perf_counter() - t_all, stored, rejected, per_round

    def run_drained(batches_per_poll):
        """The production path: beat's drain stores a poll's queued batches in one go."""
        truncate_samples()
        stored, t_all = 0, time.perf_counter()
        for batches in batches_per_poll:
            stored += sum(r.stored for r in telemetry_ingest_many(batches=batches))
        return time.perf_counter() - t_all, stored

    drained_s, drained_stored = run_drained(polls)
    assert drained_stored == total, drained_stored
    assert GpuSample.objects.count() == total

    ours_s, stored, rejected, per_round = run_portal(polls)
    per_batch_statements = dict(statements)
    assert stored == total and rejected == 0, (stored, rejected)
    assert GpuSample.objects.count() == total

    # Duplicate path: the first poll again under new sequence numbers. Every COPY meets a
    # duplicate, rolls back to its savepoint and goes through staging + ON CONFLICT.
    again = [{**batch, "seq": batch["seq"] + 1000} for batch in polls[0]]
    t_dup = time.perf_counter()
    dup_stored = sum(telemetry_ingest(batch=batch).stored for batch in again)
    dup_s = time.perf_counter() - t_dup
    assert dup_stored == 0 and GpuSample.objects.count() == total

    wide_s, wide_stored, wide_rejected, _ = run_portal(wide_polls)
    assert wide_stored == total and wide_rejected == 0, (wide_stored, wide_rejected)

    conn = raw_connection()
    try:

        def run_copy(chunks_per_poll):
            conn.execute("TRUNCATE telemetry_gpusample")
            conn.commit()
            t_all = time.perf_counter()
            for chunks in chunks_per_poll:
                for chunk in chunks:
                    with conn.transaction(), conn.cursor() as cur, cur.copy(COPY_SQL) as copy:
                        for row in chunk:
                            copy.write_row(row)
            elapsed = time.perf_counter() - t_all
            count = conn.execute("SELECT count(*) FROM telemetry_gpusample").fetchone()[0]
            assert count == total, count
            return elapsed

        # Baseline: one COPY (one transaction) of the whole poll.
        copy_s = run_copy([[poll_rows] for poll_rows in rows])
        # For reference: one COPY + commit per node batch, the same transactions the portal has.
        per_batch = [
            [poll_rows[i : i + per_node] for i in range(0, len(poll_rows), per_node)]
            for poll_rows in rows
        ]
        copy_batch_s = run_copy(per_batch)
    finally:
        conn.close()
    truncate_samples()

    print(f"{'path':66} {'seconds':>8} {'samples/s':>10}")
    lines = [
        (
            f"portal drain: telemetry_ingest_many, {nodes} batches of {per_node} per call",
            drained_s,
            total,
        ),
        (f"portal telemetry_ingest one batch at a time, {nodes} per poll", ours_s, total),
        (
            f"portal telemetry_ingest, {len(wide_fleet)} batches of 200 per poll (reference)",
            wide_s,
            total,
        ),
        (f"portal duplicate path: 1 poll again, {len(again)} batches", dup_s, len(rows[0])),
        ("baseline: raw COPY, one per poll", copy_s, total),
        (f"raw COPY + commit per {per_node}-sample batch (reference)", copy_batch_s, total),
    ]
    for label, seconds, n in lines:
        print(f"{label:66} {seconds:8.2f} {n / seconds:10.0f}")
    print(
        f"per poll (portal): {', '.join(f'{s:.2f} s' for s in per_round)}; "
        f"{ours_s / (rounds * nodes) * 1000:.2f} ms per batch"
    )
    print(
        f"statements per {per_node}-GPU batch through Django, besides its COPY and COMMIT: "
        f"{sum(per_batch_statements.values())} ("
        + ", ".join(f"{n} {kind}" for kind, n in per_batch_statements.items())
        + ")"
    )
    print(
        f"ratio (portal drain / raw COPY) throughput: {copy_s / drained_s:.3f}   "
        f"(target >= 50,000 samples/s: {'met' if total / drained_s >= 50_000 else 'NOT met'}; "
        f"ratio >= 0.5: {'met' if copy_s / drained_s >= 0.5 else 'NOT met'}); "
        f"one batch at a time: {copy_s / ours_s:.3f}"
    )


# --- (b) end-to-end lag ----------------------------------------------------------------------


def serve_agents(args) -> None:
    """A process hosting many node agents: the agent's own Agent class and simulated NVML,
    one Celery worker consuming every hosted node's queue (python -m workers.agent hosts one)."""
    from celery import Celery
    from celery.signals import worker_ready

    from workers.agent.agent import Agent
    from workers.agent.app import PORTAL_QUEUE, TELEMETRY_QUEUE, node_queue
    from workers.agent.backends import make_reader

    app = Celery("bench_agents", broker=args.redis_url)
    app.conf.update(  # as workers.agent.app.create_app
        broker_transport_options={"visibility_timeout": 3600},
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=120,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )

    def send(task_name: str, payload: dict) -> None:  # as workers.agent.app: batches queue up
        queue = TELEMETRY_QUEUE if task_name == "telemetry.ingest" else PORTAL_QUEUE
        app.send_task(task_name, args=[payload], queue=queue, retry=False)

    hostnames = [f"{args.node_prefix}-{i:03d}" for i in range(args.node_first, args.node_last)]
    agents = {
        node_queue(hostname): Agent(
            hostname=hostname,
            backend="simulated",
            reader=make_reader(
                "simulated", hostname, gpu_count=args.gpus_per_node, profile="random", seed=i
            ),
            send=send,
        )
        for i, hostname in enumerate(hostnames)
    }

    @app.task(name="agent.poll", bind=True, acks_late=False)
    def poll(self) -> dict:
        return agents[self.request.delivery_info["routing_key"]].poll()

    @worker_ready.connect(weak=False)
    def register(sender=None, **kwargs) -> None:
        for agent in agents.values():
            agent.register()

    app.worker_main(
        [
            "worker",
            "--queues",
            ",".join(agents),
            "--hostname",
            f"agents-{args.node_first}@bench",
            "--pool",
            "solo",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
        ]
    )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


class Observer(threading.Thread):
    """Polls the sample table every `interval` s on its own connection and records, for each
    sample, the moment before the query that first saw it: an upper bound of its commit time,
    at most `interval` (+ the query) late. New rows are found by id: the solo portal worker is
    the only writer, so ids are committed in order."""

    def __init__(self, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.stop_event = threading.Event()
        self.seen: list[tuple[float, float, int]] = []  # (seen at, sample ts, how many)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = raw_connection()
            conn.autocommit = True
            last_id = 0
            while not self.stop_event.is_set():
                before = time.time()
                rows = conn.execute(
                    "SELECT extract(epoch FROM ts)::float8, count(*), max(id) "
                    "FROM telemetry_gpusample WHERE id > %s GROUP BY ts",
                    [last_id],
                ).fetchall()
                for ts, count, max_id in rows:
                    self.seen.append((before, ts, count))
                    last_id = max(last_id, max_id)
                self.stop_event.wait(max(0.0, self.interval - (time.time() - before)))
            conn.close()
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            self.error = error

    @property
    def samples(self) -> int:
        return sum(count for _, _, count in self.seen)


def start_agents(args, logs: Path, env: dict) -> list[subprocess.Popen]:
    agent_env = {
        k: v for k, v in env.items() if not k.startswith(("DATABASE", "DJANGO_"))
    }  # agents hold no database
    procs = []
    if args.agent_mode == "nodes":
        nodes = args.gpus // 8
        share = -(-nodes // args.agent_procs)
        for first in range(0, nodes, share):
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--serve-agents",
                "--node-prefix",
                "bench-node",
                "--node-first",
                str(first),
                "--node-last",
                str(min(nodes, first + share)),
                "--gpus-per-node",
                "8",
                "--redis-url",
                args.redis_url,
            ]
            log = open(logs / f"agents-{first}.log", "w")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(command, cwd=ROOT, env=agent_env, stdout=log, stderr=log))
    else:
        per_proc = args.gpus // args.agent_procs
        for k in range(args.agent_procs):
            command = [
                sys.executable,
                "-m",
                "workers.agent",
                "--backend",
                "simulated",
                "--gpus",
                str(per_proc),
                "--hostname",
                f"bench-{k}",
                "--profile",
                "random",
                "--seed",
                str(k),
                "--loglevel",
                "WARNING",
            ]
            log = open(logs / f"agent-{k}.log", "w")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(command, cwd=ROOT, env=agent_env, stdout=log, stderr=log))
    return procs


def batch_lags() -> tuple[list[float], list[float]]:
    """From IngestBatch: received_at (stamped when the batch key is inserted, just before its
    rows are copied and committed) minus the batch's sample ts; and per poll, the spread of
    received_at (how long the portal worker took to drain one poll). A node's k-th batch holds
    its k-th distinct sample ts (the agent stamps one ts per poll)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT node, extract(epoch FROM received_at)::float8 FROM telemetry_ingestbatch "
            "ORDER BY node, seq"
        )
        batches: dict[str, list[float]] = {}
        for node, received in cursor.fetchall():
            batches.setdefault(node, []).append(received)
        cursor.execute(
            "SELECT n.hostname, extract(epoch FROM s.ts)::float8 FROM telemetry_gpusample s "
            "JOIN fleet_gpu g ON g.id = s.gpu_id JOIN fleet_node n ON n.id = g.node_id "
            "GROUP BY n.hostname, s.ts ORDER BY n.hostname, s.ts"
        )
        stamps: dict[str, list[float]] = {}
        for node, ts in cursor.fetchall():
            stamps.setdefault(node, []).append(ts)
    lags = []
    for node, received in batches.items():
        if len(received) == len(stamps.get(node, ())):
            lags.extend(r - t for r, t in zip(received, stamps[node], strict=True))
    return lags, [r for rs in batches.values() for r in rs]


def direct_ingest_lags(rounds: int = 3) -> tuple[list[float], list[float]]:
    """Baseline: the same poll (every registered node's batch, same GPUs, one ts) ingested by
    telemetry_ingest in this process, one batch after another as the solo worker does, no
    broker and no agents. Lag of each sample: time its batch's call returned (committed)
    minus its ts. Also the duration of each call."""
    from apps.fleet.models import Gpu
    from apps.telemetry.ingest import telemetry_ingest

    fleet: dict[str, list[str]] = {}
    for hostname, uuid in Gpu.objects.order_by().values_list("node__hostname", "uuid"):
        fleet.setdefault(hostname, []).append(uuid)
    rng = random.Random(3)
    lags, calls = [], []
    for r in range(rounds):
        time.sleep(1)
        ts = time.time()
        for hostname, uuids in fleet.items():
            batch = {
                "node": hostname,
                "seq": 10**15 + r,
                "samples": [agent_sample(u, ts, rng.randrange(101), 10**9 + r) for u in uuids],
            }
            t_call = time.time()
            result = telemetry_ingest(batch=batch)
            done = time.time()
            assert result.stored == len(uuids), result
            calls.append(done - t_call)
            lags.extend([done - ts] * len(uuids))
    return lags, calls


def bench_lag(args) -> None:
    import redis
    from django.conf import settings

    from apps.fleet.models import Gpu, Node
    from apps.telemetry.tasks import poll_fleet

    broker, poll_seconds = settings.CELERY_BROKER_URL, settings.TELEMETRY_POLL_SECONDS
    assert (broker, poll_seconds) == (args.redis_url, POLL_SECONDS), (broker, poll_seconds)
    reset_tables()
    redis.Redis.from_url(args.redis_url).flushdb()
    cycles = max(1, round(args.minutes * 60 / POLL_SECONDS))
    agents_label = (
        f"{args.gpus // 8} nodes x 8 GPUs in {args.agent_procs} agent-host processes"
        if args.agent_mode == "nodes"
        else f"{args.agent_procs} python -m workers.agent processes x "
        f"{args.gpus // args.agent_procs} GPUs"
    )
    print(
        f"\n(b) end-to-end lag: {args.gpus} simulated GPUs ({agents_label}), poll every "
        f"{POLL_SECONDS} s for {cycles * POLL_SECONDS / 60:.1f} min, Redis {args.redis_url}, "
        "one portal worker (solo pool)"
    )
    logs = Path(tempfile.mkdtemp(prefix="bench-telemetry-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "CELERY_BROKER_URL": args.redis_url,
        "PYTHONPATH": str(ROOT),
    }
    env.pop("REDIS_URL", None)
    procs: list[subprocess.Popen] = []
    observer = Observer()
    stop_drains = threading.Event()
    try:
        worker_log = open(logs / "portal-worker.log", "w")  # noqa: SIM115 - closed below
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "portal",
                    "worker",
                    "-Q",
                    "portal",
                    "--pool",
                    "solo",
                    "--loglevel",
                    "WARNING",
                    "--hostname",
                    "bench-portal@%h",
                ],
                cwd=ROOT,
                env=env,
                stdout=worker_log,
                stderr=worker_log,
            )
        )
        t0 = time.perf_counter()
        procs += start_agents(args, logs, env)
        deadline = time.monotonic() + 180
        while Gpu.objects.count() < args.gpus:
            dead = [p for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(
                    f"agents did not register ({Gpu.objects.count()} of {args.gpus} GPUs); "
                    f"logs in {logs}"
                )
            time.sleep(0.5)
        print(f"agents registered {args.gpus} GPUs in {time.perf_counter() - t0:.1f} s")
        time.sleep(2)  # let the worker finish the registration tail
        observer.start()
        # Stand-in for beat's telemetry-drain entry: the portal worker drains the queue.

        def trigger_drains():
            from celery import current_app
            from django.conf import settings as django_settings

            every = django_settings.TELEMETRY_DRAIN_SECONDS
            while not stop_drains.wait(every):
                current_app.send_task("telemetry.drain", queue="portal", expires=every)

        drainer = threading.Thread(target=trigger_drains, daemon=True)
        drainer.start()
        sent_at, send_s = [], []
        next_poll = time.time()
        for _ in range(cycles):
            time.sleep(max(0.0, next_poll - time.time()))
            sent_at.append(time.time())
            poll_fleet()
            send_s.append(time.time() - sent_at[-1])
            next_poll += POLL_SECONDS
        expected = cycles * args.gpus
        drain_deadline = time.time() + POLL_SECONDS
        while observer.samples < expected and time.time() < drain_deadline:
            time.sleep(0.2)
        time.sleep(0.3)
    finally:
        stop_drains.set()
        observer.stop_event.set()
        for process in reversed(procs):
            stop(process)
        observer.join(timeout=10)
    if observer.error:
        raise observer.error
    lags = [seen - ts for seen, ts, count in observer.seen for _ in range(count)]
    from_poll, agent_side = [], []
    for seen, ts, count in observer.seen:
        sent = max((s for s in sent_at if s <= ts), default=sent_at[0])
        from_poll.extend([seen - sent] * count)
        agent_side.extend([ts - sent] * count)
    received_lags, received = batch_lags()
    drains = []
    for sent in sent_at:
        in_cycle = [r for r in received if sent <= r < sent + POLL_SECONDS]
        if in_cycle:
            drains.append(max(in_cycle) - sent)
    base_lags, base_calls = direct_ingest_lags()

    stored = len(lags)
    per_poll = args.gpus
    batches = Node.objects.count()
    print(
        f"samples stored {stored} of {expected} expected: {stored / (cycles * POLL_SECONDS):.1f} "
        f"samples/s sustained (the fleet sends {args.gpus / POLL_SECONDS:.1f}/s); while "
        f"draining a poll {per_poll / percentile(drains, 0.5):.0f} samples/s "
        f"({percentile(drains, 0.5) / batches * 1000:.1f} ms per {per_poll // batches}-GPU batch); "
        f"poll_fleet() call {statistics.median(send_s) * 1000:.0f} ms"
    )
    print(f"{'lag, seconds':56} {'p50':>6} {'p95':>6} {'max':>6}")

    def line(label, values):
        print(
            f"{label:56} {percentile(values, 0.5):6.3f} {percentile(values, 0.95):6.3f} "
            f"{max(values, default=float('nan')):6.3f}"
        )

    line("portal: sample ts -> row visible (observer, +<=0.1 s)", lags)
    line("portal: sample ts -> batch received_at (pre-commit)", received_lags)
    line("portal: poll_fleet sent -> agent reads GPUs (sample ts)", agent_side)
    line("portal: poll_fleet sent -> row visible", from_poll)
    line("portal: poll_fleet sent -> last batch of the poll", drains)
    line(f"baseline: in-process ingest of one poll ({batches} batches)", base_lags)
    line("baseline: one in-process telemetry_ingest call", base_calls)
    p95, base_p95 = percentile(lags, 0.95), percentile(base_lags, 0.95)
    print(
        f"ratio (portal / in-process) p95 lag: {p95 / base_p95:.1f}   "
        f"(target p95 < 5 s: {'met' if p95 < 5 else 'NOT met'}); logs in {logs}"
    )


# --- (c) rollups -----------------------------------------------------------------------------


def bench_rollups(nodes: int = 125, per_node: int = 8) -> None:
    from django.db import connection

    from apps.fleet.models import GpuModel
    from apps.reservations.models import Reservation, ReservationGpu
    from apps.teams.models import Team, User
    from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup
    from apps.telemetry.rollups import rollup_hours, rollup_minutes

    reset_tables()
    t0 = time.perf_counter()
    fleet = make_fleet("rollup", nodes, per_node)
    gpu_ids = [pk for _, gpus in fleet for pk, _ in gpus]
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    end = hour + timedelta(hours=1)
    # Half the GPUs booked, starting at different minutes: the rollup attributes each minute.
    model = GpuModel.objects.get(name=GPU_MODEL)
    team = Team.objects.create(slug="bench", name="Bench")
    user = User.objects.create(username="bench")
    booked = gpu_ids[: len(gpu_ids) // 2]
    starts = [hour - timedelta(minutes=30) + timedelta(minutes=i % 80) for i in range(len(booked))]
    reservations = Reservation.objects.bulk_create(
        Reservation(
            team=team,
            created_by=user,
            gpu_model=model,
            count=1,
            start=s,
            end=s + timedelta(hours=2),
            status="active",
        )
        for s in starts
    )
    ReservationGpu.objects.bulk_create(
        ReservationGpu(reservation=r, gpu_id=g, start=r.start, end=r.end)
        for r, g in zip(reservations, booked, strict=True)
    )
    # One hour at 15 s, plus the 5 minutes before it (the rollup's energy look-back).
    steps = int(timedelta(hours=1) / timedelta(seconds=POLL_SECONDS))
    lead = 20
    rng = random.Random(11)
    conn = raw_connection()
    try:
        with conn.transaction(), conn.cursor() as cur, cur.copy(COPY_SQL) as copy:
            for gpu_id in gpu_ids:
                energy = rng.randrange(10**9)
                for k in range(-lead, steps):
                    util = rng.randrange(101)
                    power = 70.0 + 6.3 * util
                    energy += int(power * POLL_SECONDS * 1000)
                    copy.write_row(
                        (
                            gpu_id,
                            hour + k * timedelta(seconds=POLL_SECONDS),
                            util,
                            int(util * 0.6),
                            int(MEMORY_MIB * 0.85 * util / 100),
                            power,
                            30 + int(0.45 * util),
                            energy,
                        )
                    )
        conn.execute("ANALYZE")
        conn.commit()
        in_hour = conn.execute(
            "SELECT count(*) FROM telemetry_gpusample WHERE ts >= %s AND ts < %s", [hour, end]
        ).fetchone()[0]
        print(
            f"\n(c) rollups: {len(gpu_ids)} GPUs x {steps} samples = {in_hour} raw rows in "
            f"the hour ({len(booked)} GPUs booked; loaded in {time.perf_counter() - t0:.1f} s)"
        )

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            portal_pid = cursor.fetchone()[0]
        cpu = {}  # label -> CPU seconds of the database backend that ran it

        def timed(label, fn, pid=None):
            """The result and wall seconds; the database backend's CPU seconds go to `cpu`: the
            shared machine's load stretches wall time far more."""
            pid = pid or portal_pid
            before, t = backend_cpu(pid), time.perf_counter()
            result = fn()
            wall = time.perf_counter() - t
            cpu[label] = backend_cpu(pid) - before
            return result, wall

        group_by = (
            "SELECT gpu_id, date_trunc('minute', ts) AS bucket, count(*) AS samples, "
            "avg(util_gpu) AS util_avg, max(util_gpu) AS util_max, "
            "avg(mem_used_mib) AS mem_avg, max(mem_used_mib) AS mem_max, "
            "avg(power_w) AS power_avg FROM telemetry_gpusample "
            "WHERE ts >= %(start)s AND ts < %(end)s GROUP BY gpu_id, date_trunc('minute', ts)"
        )
        params = {"start": hour, "end": end}
        # Warm the cache the same way for both: read the rows once.
        conn.execute(f"SELECT count(*) FROM ({group_by}) g", params)  # noqa: S608
        minutes_rows, minutes_s = timed("first", lambda: rollup_minutes(start=hour, end=end))
        again_rows, again_s = timed("again", lambda: rollup_minutes(start=hour, end=end))
        last5 = end - timedelta(minutes=5)  # telemetry.minutely's window, every minute
        last5_rows, last5_s = timed("last5", lambda: rollup_minutes(start=last5, end=end))
        # As the minutely task finds it: the newest minute's samples not rolled up yet.
        GpuMinuteRollup.objects.filter(bucket__gte=end - timedelta(minutes=1)).delete()
        newest_rows, newest_s = timed("newest", lambda: rollup_minutes(start=last5, end=end))
        hours_rows, hours_s = timed("hours", lambda: rollup_hours(start=hour, end=end))
        baseline_rows, baseline_s = timed(
            "baseline",
            lambda: conn.execute(f"SELECT count(*) FROM ({group_by}) g", params).fetchone()[0],  # noqa: S608
            conn.info.backend_pid,
        )
        conn.rollback()

        def into_table():
            with conn.transaction():
                conn.execute(f"CREATE TEMP TABLE bench_minutes AS {group_by}", params)  # noqa: S608
                conn.execute("DROP TABLE bench_minutes")

        _, into_s = timed("into", into_table, conn.info.backend_pid)
    finally:
        conn.close()
    assert minutes_rows == baseline_rows == len(gpu_ids) * 60, (minutes_rows, baseline_rows)
    # Minutes whose samples and holder did not change are not recomputed.
    assert again_rows == last5_rows == 0 and newest_rows == len(gpu_ids), (
        again_rows,
        last5_rows,
        newest_rows,
    )
    assert hours_rows == len(gpu_ids)
    assert GpuMinuteRollup.objects.filter(bucket__gte=hour, bucket__lt=end).count() == minutes_rows
    assert GpuHourRollup.objects.filter(bucket=hour).count() == len(gpu_ids)
    with connection.cursor() as cursor:  # same numbers as the plain GROUP BY
        cursor.execute(
            f"SELECT count(*), max(abs(m.util_avg - g.util_avg)), "  # noqa: S608
            f"count(*) FILTER (WHERE m.team_id IS NOT NULL) "
            f"FROM telemetry_gpuminuterollup m JOIN ({group_by}) g "
            "ON g.gpu_id = m.gpu_id AND g.bucket = m.bucket AND g.samples = m.samples",
            params,
        )
        matched, worst, attributed = cursor.fetchone()
    assert matched == minutes_rows and worst < 1e-9, (matched, worst)

    print(f"{'query':66} {'rows':>7} {'seconds':>8} {'db cpu s':>8}")
    for key, label, n, seconds in (
        ("first", "rollup_minutes over the hour (first run, inserts)", minutes_rows, minutes_s),
        ("again", "rollup_minutes over the hour again (nothing new: none recomputed)", again_rows,
         again_s),
        ("last5", "rollup_minutes, last 5 minutes (the minutely window), nothing new", last5_rows,
         last5_s),
        ("newest", "rollup_minutes, last 5 minutes, the newest one new", newest_rows, newest_s),
        ("hours", "rollup_hours over the hour", hours_rows, hours_s),
        ("baseline", "baseline: plain GROUP BY (gpu_id, minute) avg/max", baseline_rows,
         baseline_s),
        ("into", "same GROUP BY into a temp table (reference)", baseline_rows, into_s),
    ):  # fmt: skip
        print(f"{label:66} {n:7d} {seconds:8.3f} {cpu[key]:8.3f}")
    print(
        f"minute rows attributed to a team: {attributed}; ratio (rollup_minutes / GROUP BY): "
        f"{minutes_s / baseline_s:.1f} wall, {cpu['first'] / cpu['baseline']:.1f} database CPU "
        f"  (target rollup under 5 s: {'met' if minutes_s + hours_s < 5 else 'NOT met'})"
    )


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) a PostgreSQL backend on this machine has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- (d) queue drain ---------------------------------------------------------------------------


def bench_drain(nodes: int = 250, polls: int = 8, per_node: int = 8) -> None:
    from django.conf import settings

    from apps.telemetry import drain
    from portal.celery import app

    reset_tables()
    fleet = make_fleet("drain", nodes, per_node)
    rng = random.Random(11)
    energy: dict = {}
    start = time.time() - polls * POLL_SECONDS
    batches = [
        b
        for r in range(polls)
        for b in make_batches(fleet, start + r * POLL_SECONDS, r + 1, rng, energy)
    ]
    total = sum(len(b["samples"]) for b in batches)
    print(f"\n(d) queue drain: {len(batches)} batches ({total} samples) queued on Redis")

    def queue_all() -> None:
        for payload in batches:
            app.send_task("telemetry.ingest", args=[payload], queue=settings.TELEMETRY_QUEUE)

    def timed(run) -> tuple[float, int]:
        truncate_samples()
        queue_all()
        t0 = time.perf_counter()
        stored = 0
        while True:
            result = run()
            if not result["batches"]:
                break
            stored += result["stored"]
        return time.perf_counter() - t0, stored

    results = {}
    for name, run in (
        ("portal drain (LMOVE, loss-free)", lambda: drain.telemetry_drain(max_batches=500)),
        ("kombu basic_get + ack (baseline)", lambda: drain._drain_with_kombu(500, 10**9)),
    ):
        seconds, stored = timed(run)
        assert stored == total, (name, stored, total)
        results[name] = seconds
        print(f"  {name:36s} {seconds:7.2f} s   {total / seconds:9,.0f} samples/s")
    portal, baseline = results.values()
    print(f"  ratio (portal / baseline) time: {portal / baseline:.2f}")


# --- (e) big backlog, drained by a sample budget ----------------------------------------------

MAX_BATCH_SAMPLES = 10_000  # ingest's MAX_SAMPLES_PER_BATCH
MAX_BACKLOG_BATCHES = 2_000  # a full agent buffer's worth of max-size batches


def bench_backlog(messages: int = 40, nodes: int = 2) -> None:
    from django.conf import settings

    from apps.telemetry import drain
    from portal.celery import app

    reset_tables()
    fleet = make_fleet("big", nodes, MAX_BATCH_SAMPLES)
    analyze()
    gpu_ids = {uuid: pk for _, gpus in fleet for pk, uuid in gpus}
    rng = random.Random(5)
    energy: dict = {}
    polls = -(-messages // nodes)
    start = time.time() - polls * POLL_SECONDS
    batches = [
        b
        for r in range(polls)
        for b in make_batches(fleet, start + r * POLL_SECONDS, r + 1, rng, energy)
    ][:messages]
    total = sum(len(b["samples"]) for b in batches)
    budget = settings.TELEMETRY_DRAIN_MAX_SAMPLES
    print(
        f"\n(e) big backlog: {len(batches)} batches of {MAX_BATCH_SAMPLES:,} samples "
        f"({total:,}) queued on Redis; sample budget per drain {budget:,}"
    )
    truncate_samples()
    for payload in batches:
        app.send_task("telemetry.ingest", args=[payload], queue=settings.TELEMETRY_QUEUE)
    runs = []
    t0 = time.perf_counter()
    while True:
        t_run = time.perf_counter()
        result = drain.telemetry_drain()
        if not result["batches"]:
            break
        runs.append((time.perf_counter() - t_run, result["stored"]))
    portal_s = time.perf_counter() - t0
    stored = sum(n for _, n in runs)
    assert stored == total, (stored, total)

    rows = rows_of(batches, gpu_ids)
    truncate_samples()
    conn = raw_connection()
    try:
        t0 = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur, cur.copy(COPY_SQL) as copy:
            for row in rows:
                copy.write_row(row)
        copy_s = time.perf_counter() - t0
    finally:
        conn.close()
    truncate_samples()

    portal_rate, copy_rate = total / portal_s, total / copy_s
    longest = max(seconds for seconds, _ in runs)
    print(
        f"  {'portal drain, sample budget':36s} {portal_s:7.2f} s   {portal_rate:9,.0f} samples/s"
    )
    print(
        f"  {'raw COPY of the rows (baseline)':36s} {copy_s:7.2f} s   {copy_rate:9,.0f} samples/s"
    )
    print(f"  ratio (portal / baseline) samples/s: {portal_rate / copy_rate:.2f}")
    print(
        f"  {len(runs)} drain runs, {max(n for _, n in runs):,} samples at most, "
        f"longest {longest:.2f} s"
    )
    biggest = MAX_BACKLOG_BATCHES * MAX_BATCH_SAMPLES
    per_run = min(biggest, budget + MAX_BATCH_SAMPLES)
    print(
        f"  max-size backlog ({MAX_BACKLOG_BATCHES:,} x {MAX_BATCH_SAMPLES:,} = {biggest:,}) at "
        f"this rate: {biggest / portal_rate:.0f} s in all; one run bounded by messages only "
        f"would take it all in one ({biggest / portal_rate:.0f} s, hard limit 60 s); bounded by "
        f"samples: {-(-biggest // per_run)} runs of about {per_run / portal_rate:.1f} s"
    )


# --- main ------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("a", "b", "c", "d", "e"), help="run one part")
    parser.add_argument("--backlog", type=int, default=40, help="(e) max-size batches queued")
    parser.add_argument("--minutes", type=float, default=3.0, help="(b) how long to poll")
    parser.add_argument("--gpus", type=int, default=1000, help="(b) simulated GPUs")
    parser.add_argument("--rollup-gpus", type=int, default=1000, help="(c) GPUs, 8 per node")
    parser.add_argument("--agent-mode", choices=("nodes", "processes"), default="nodes")
    parser.add_argument(
        "--agent-procs", type=int, default=2, help="(b) agent processes (nodes mode: hosts)"
    )
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    internal = parser.add_argument_group("internal (the agent-host processes of part b)")
    internal.add_argument("--serve-agents", action="store_true", help=argparse.SUPPRESS)
    internal.add_argument("--node-prefix", default="bench-node", help=argparse.SUPPRESS)
    internal.add_argument("--node-first", type=int, default=0, help=argparse.SUPPRESS)
    internal.add_argument("--node-last", type=int, default=0, help=argparse.SUPPRESS)
    internal.add_argument("--gpus-per-node", type=int, default=8, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.serve_agents:
        serve_agents(args)
        return
    # SIGTERM as Ctrl-C: the finally blocks stop the worker and agent subprocesses.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    setup_django(args.database_url, args.redis_url)
    t0 = time.perf_counter()
    from bench.common import recreate_database

    recreate_database()
    print(f"database {os.environ['DATABASE_URL'].rsplit('/', 1)[-1]} rebuilt")
    if args.only in (None, "a"):
        bench_ingest()
    if args.only in (None, "b"):
        bench_lag(args)
    if args.only in (None, "c"):
        bench_rollups(nodes=args.rollup_gpus // 8)
    if args.only in (None, "d"):
        bench_drain()
    if args.only in (None, "e"):
        bench_backlog(args.backlog)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
