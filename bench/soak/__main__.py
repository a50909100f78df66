"""Soak: the portal's whole production stack under load and faults, then its invariants.

    python -m bench.soak [--seconds 600]        (make soak; SOAK_SECONDS=180 make soak)

Starts its own Redis (a child redis-server on a free port, AOF on) and its own PostgreSQL
database (portal_soak_<pid> on SOAK_POSTGRES, default postgres://postgres@127.0.0.1:5432,
dropped at the end), seeds the demo's teams and fleet, then runs gunicorn, a portal Celery
worker, beat and four simulated node agents. For --seconds, one API client per team books and
cancels GPUs and submits and cancels jobs over HTTP with its API token, while telemetry flows
from the agents and the soak SIGKILLs the worker (and starts it again), restarts Redis
(SIGTERM, start) and pauses it (SIGSTOP for 65 s, SIGCONT). Then the load stops, the system
settles (every job finished, the telemetry queue empty; at most --settle seconds), the agents
stop, the finished hours are metered (twice), and the invariants of bench.soak.invariants are
checked and printed. Exit status 1 when any is broken.
"""

import argparse
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POLL_SECONDS = 5
PAUSE_SECONDS = 65
JOB_SECONDS = (10, 40)
JOB_MAX_RUNTIME = 300
NODES = [  # as seeded by seed_demo
    ("gpu-h100-01", "H100-SXM-80GB", 8, []),
    ("gpu-h100-02", "H100-SXM-80GB", 8, []),
    ("gpu-a100-01", "A100-SXM4-80GB", 8, ["--memory-mib", "81920"]),
    ("gpu-l40s-01", "L40S-48GB", 4, ["--memory-mib", "46068", "--no-nvlink"]),
]
# team: GPU models it has quota for (seed_demo)
CLIENTS = {
    "vision": ["H100-SXM-80GB", "L40S-48GB"],
    "nlp": ["H100-SXM-80GB", "A100-SXM4-80GB"],
    "speech": ["A100-SXM4-80GB", "L40S-48GB"],
    "robotics": ["H100-SXM-80GB"],
}


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Stack:
    """The soak's processes: Redis, gunicorn, worker, beat and agents, all children of this
    process, each logging to a file in the run folder."""

    def __init__(self, folder: Path, database_url: str) -> None:
        self.folder = folder
        self.redis_port = free_port()
        self.web_port = free_port()
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        self.base_url = f"http://127.0.0.1:{self.web_port}"
        self.processes: dict[str, subprocess.Popen] = {}
        clean = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DATABASE", "TEST_DATABASE", "DJANGO_", "REDIS", "CELERY"))
        }
        self.agent_env = {
            **clean,
            "CELERY_BROKER_URL": self.redis_url,
            "AGENT_JOB_DIR": str(folder / "agent-jobs"),
            "SOAK_SENT_DIR": str(folder),
        }
        # Production settings, as docker-compose runs them (minus TLS: plain HTTP on loopback).
        self.portal_env = {
            **clean,
            "DATABASE_URL": database_url,
            "REDIS_URL": self.redis_url,
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
            "DJANGO_SECURE_SSL_REDIRECT": "0",
            "DJANGO_HSTS_SECONDS": "0",
            "TELEMETRY_POLL_SECONDS": str(POLL_SECONDS),
            "LOG_LEVEL": "WARNING",
        }

    def _start(self, name: str, command: list[str], env: dict) -> subprocess.Popen:
        with open(self.folder / f"{name}.log", "ab") as output:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a kill reaches its children
            )
        self.processes[name] = process
        return process

    def start_redis(self) -> None:
        (self.folder / "redis").mkdir(exist_ok=True)
        command = ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1"]
        command += ["--daemonize", "no", "--save", "", "--appendonly", "yes"]
        command += ["--dir", str(self.folder / "redis")]
        self._start("redis", command, self.agent_env)
        if not wait(lambda: self.redis_ping(), 30):
            raise SystemExit("redis-server did not start")

    def redis_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.redis_port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def redis_llen(self, queue: str) -> int | None:
        try:
            with socket.create_connection(("127.0.0.1", self.redis_port), timeout=2) as sock:
                sock.sendall(f"LLEN {queue}\r\n".encode())
                reply = sock.recv(64)
                return int(reply[1:].split(b"\r\n")[0]) if reply.startswith(b":") else None
        except (OSError, ValueError):
            return None

    def web_answers(self) -> bool:
        import requests

        try:
            return requests.get(f"{self.base_url}/healthz", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def start_portal(self) -> None:
        python = sys.executable
        self._start(
            "web",
            [python, "-m", "gunicorn", "portal.wsgi:application", "--bind", self.base_url[7:]]
            + ["--workers", "2", "--threads", "4", "--worker-class", "gthread"]
            + ["--timeout", "120", "--log-level", "info"],
            self.portal_env,
        )
        self.start_worker()
        schedule = str(self.folder / "celerybeat-schedule")
        self._start(
            "beat",
            [python, "-m", "celery", "-A", "portal", "beat", "-l", "warning", "-s", schedule],
            self.portal_env,
        )

    def start_worker(self) -> None:
        self._start(
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "-Q",
                "portal",
                "-l",
                "warning",
            ]
            + ["--concurrency", "2", "--hostname", f"soak-{os.getpid()}@%h"],
            self.portal_env,
        )

    def start_agents(self) -> None:
        for index, (hostname, model, gpus, extra) in enumerate(NODES):
            command = [sys.executable, "-m", "bench.soak.agent", "--backend", "simulated"]
            command += ["--hostname", hostname, "--gpus", str(gpus), "--model", model]
            command += ["--profile", "random", "--seed", str(index), "--loglevel", "WARNING"]
            self._start(f"agent-{hostname}", command + extra, self.agent_env)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, sig)
        process.wait(timeout=60)

    def stop(self, name: str) -> None:
        process = self.processes.get(name)
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGCONT)  # a paused Redis must hear the SIGTERM
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    def stop_all(self) -> None:
        for name in reversed(list(self.processes)):
            self.stop(name)

    # --- faults ---------------------------------------------------------------------------------

    def kill_worker(self) -> None:
        self.kill("worker")
        time.sleep(2)
        self.start_worker()

    def restart_redis(self) -> None:
        self.stop("redis")
        self.start_redis()

    def pause_redis(self, seconds: float, stop_event: threading.Event) -> None:
        pid = self.processes["redis"].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            stop_event.wait(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)


def wait(condition: Callable[[], bool], timeout: float, every: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return False


# --- the database -------------------------------------------------------------------------------


def create_database(server: str, name: str) -> str:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


def drop_database(server: str, name: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def set_up(database_url: str, redis_url: str) -> dict[str, tuple[str, list[str]]]:
    """Migrate and seed the soak database in this process; returns per team its client's
    API token and GPU models."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DJANGO_DEBUG="1",
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        TELEMETRY_POLL_SECONDS=str(POLL_SECONDS),
        LOG_LEVEL="WARNING",
    )
    import django

    django.setup()
    from django.core.management import call_command

    from apps.teams.choices import ApiTokenScope
    from apps.teams.models import Membership, Team, User
    from apps.teams.tokens import api_token_create

    call_command("migrate", verbosity=0)
    call_command("seed_demo", "--without-reservations", verbosity=0)
    clients = {}
    for slug, models in CLIENTS.items():
        user = User.objects.create(username=f"soak-{slug}", email=f"soak-{slug}@example.com")
        Membership.objects.create(user=user, team=Team.objects.get(slug=slug))
        _, key = api_token_create(
            user=user, name="soak", scope=ApiTokenScope.READ_WRITE, expires_in_days=1
        )
        clients[slug] = (key, models)
    return clients


# --- the load -----------------------------------------------------------------------------------


class Client(threading.Thread):
    """One team's script: books and cancels GPUs, submits and cancels jobs, lists its own."""

    def __init__(self, team, key, models, base_url, runs: Path, stop_event) -> None:
        super().__init__(daemon=True, name=f"client-{team}")
        self.team, self.key, self.models, self.base_url = team, key, models, base_url
        self.runs, self.stop_event = runs, stop_event
        self.rng = random.Random(team)
        self.answers: list = []
        self.bookings: list[int] = []
        self.jobs: list[int] = []

    def run(self) -> None:
        import requests

        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Token {self.key}"
        # A new connection per request: a kept-alive one that the server closes while idle
        # would fail the next request on the client's side, not the portal's.
        self.http.headers["Connection"] = "close"
        while not self.stop_event.is_set():
            self.act(self.rng.random())
            self.stop_event.wait(self.rng.uniform(1.0, 3.0))

    def act(self, r: float) -> None:
        if r < 0.30:
            self.book()
        elif r < 0.40 and self.bookings:
            pk = self.bookings.pop(self.rng.randrange(len(self.bookings)))
            self.call("post", f"/api/v1/reservations/{pk}/cancel/", "booking cancel", json={})
        elif r < 0.55:
            self.submit()
        elif r < 0.65 and self.jobs:
            pk = self.jobs.pop(self.rng.randrange(len(self.jobs)))
            self.call("post", f"/api/v1/jobs/{pk}/cancel/", "job cancel", json={})
        elif r < 0.80:
            self.call("get", f"/api/v1/jobs/?team={self.team}", "job list")
        elif r < 0.95:
            self.call("get", f"/api/v1/reservations/?team={self.team}", "booking list")
        else:
            self.call("get", "/healthz", "healthz")

    def book(self) -> None:
        now = datetime.now(UTC).replace(second=0, microsecond=0)
        slot = now - timedelta(minutes=now.minute % 15) + timedelta(hours=1)
        start = slot + timedelta(minutes=15 * self.rng.randrange(0, 4 * 24))
        body = {
            "team": self.team,
            "gpu_model": self.rng.choice(self.models),
            "count": self.rng.randint(1, 2),
            "start": start.isoformat(),
            "duration": "01:00:00",
            "purpose": "soak",
        }
        answer = self.call("post", "/api/v1/reservations/", "booking create", json=body)
        if answer is not None and answer.status_code == 201:
            self.bookings.append(answer.json()["id"])

    def submit(self) -> None:
        seconds = self.rng.randint(*JOB_SECONDS)
        body = {
            "team": self.team,
            "name": "soak",
            "argv": [sys.executable, str(ROOT / "bench/soak/job.py"), str(seconds), str(self.runs)],
            "env": {"SIMULATED_RUN": "command"},
            "gpu_model": self.rng.choice(self.models),
            "gpu_count": self.rng.randint(1, 2),
            "max_runtime_seconds": JOB_MAX_RUNTIME,
        }
        answer = self.call("post", "/api/v1/jobs/", "job submit", json=body)
        if answer is not None and answer.status_code == 201:
            self.jobs.append(answer.json()["id"])

    def call(self, method: str, path: str, route: str, **kwargs):
        import requests

        from bench.soak.invariants import Answer

        at = time.strftime("%H:%M:%S")
        try:
            response = self.http.request(method, self.base_url + path, timeout=30, **kwargs)
        except requests.RequestException as error:
            self.answers.append(
                Answer(route, 0, error=f"{type(error).__name__}: {error}"[:300], at=at)
            )
            return None
        self.answers.append(
            Answer(
                route,
                response.status_code,
                retry_after="Retry-After" in response.headers,
                at=at,
            )
        )
        return response


# --- the run ------------------------------------------------------------------------------------


def faults(seconds: float) -> list[tuple[float, str]]:
    """When each fault happens, in seconds from the start of the load."""
    pause = min(PAUSE_SECONDS, 0.4 * seconds)
    plan = [(0.10 * seconds, "kill worker"), (0.20 * seconds, "restart redis")]
    plan.append((0.30 * seconds, f"pause redis {pause:.0f}"))
    plan.append((0.30 * seconds + pause + 0.10 * seconds, "kill worker"))
    if seconds >= 400:
        plan += [(0.70 * seconds, "restart redis"), (0.85 * seconds, "kill worker")]
    return sorted(plan)


def run_faults(stack: Stack, seconds: float, started: float, stop_event: threading.Event) -> None:
    for at, fault in faults(seconds):
        if stop_event.wait(max(0.0, started + at - time.monotonic())):
            return
        log(fault)
        if fault == "kill worker":
            stack.kill_worker()
        elif fault == "restart redis":
            stack.restart_redis()
        else:
            stack.pause_redis(float(fault.split()[-1]), stop_event)
            log("redis resumed")


def settle(stack: Stack, limit: float) -> None:
    """Until every job has finished and the telemetry queue is empty, at most `limit` s."""
    from django.db import connection

    from apps.jobs.choices import FINISHED_STATUSES
    from apps.jobs.models import Job

    def quiet() -> bool:
        connection.close()
        open_jobs = Job.objects.exclude(status__in=FINISHED_STATUSES).count()
        return open_jobs == 0 and stack.redis_llen("telemetry") == 0

    if not wait(quiet, limit, every=5):
        log(f"not settled after {limit:.0f} s")


def meter(start: datetime) -> tuple[int, int]:
    """Charge every hour of the run as the hourly task would once it is over; then again.
    Returns the rows the second run inserted and the charges stored."""
    from apps.billing.metering import meter_interval
    from apps.billing.models import LedgerEntry

    now = datetime.now(UTC) + timedelta(hours=1)
    meter_interval(start=start, end=now, now=now)
    again = meter_interval(start=start, end=now, now=now)
    return again.inserted, LedgerEntry.objects.filter(revision=0).count()


def check(folder: Path, answers: list, remetered: int, charges: int) -> list:
    from bench.soak import invariants as inv

    runs = inv.read_runs(folder / "runs")
    return [
        inv.bookings_overlap(),
        inv.allocations_overlap(),
        inv.allocations_in_foreign_bookings(),
        inv.gpus_in_two_processes(runs),
        inv.gpu_time_charged_twice(),
        inv.remetering_inserted(remetered, charges),
        *inv.samples_stored_once(inv.read_sent(folder)),
        inv.jobs_stuck(),
        inv.jobs_ran_twice(runs),
        *inv.server_errors(answers),
    ]


def summary(clients: list[Client]) -> str:
    from collections import Counter

    counts = Counter((a.route, a.status) for c in clients for a in c.answers)
    return ", ".join(f"{route} {status}: {n}" for (route, status), n in sorted(counts.items()))


def job_summary() -> str:
    from django.db.models import Count, Sum

    from apps.jobs.models import Job

    states = Job.objects.values("status").annotate(n=Count("id")).order_by("status")
    requeues = Job.objects.aggregate(n=Sum("requeue_count"))["n"] or 0
    return ", ".join(f"{s['status']} {s['n']}" for s in states) + f"; requeues {requeues}"


def soak(args) -> int:
    folder = Path(tempfile.mkdtemp(prefix="portal-soak-"))
    (folder / "runs").mkdir()
    name = f"portal_soak_{os.getpid()}"
    database_url = create_database(args.postgres, name)
    stack = Stack(folder, database_url)
    log(f"logs in {folder}; database {name}; redis on port {stack.redis_port}")
    try:
        stack.start_redis()
        tokens = set_up(database_url, stack.redis_url)
        stack.start_portal()
        stack.start_agents()
        from apps.fleet.choices import NodeStatus
        from apps.fleet.models import Node

        def nodes_up() -> bool:
            return Node.objects.filter(status=NodeStatus.UP).count() == len(NODES)

        if not wait(nodes_up, 120) or not wait(stack.web_answers, 60):
            raise SystemExit("the nodes or the web server did not come up")
        stop_event = threading.Event()
        clients = [
            Client(team, key, models, stack.base_url, folder / "runs", stop_event)
            for team, (key, models) in tokens.items()
        ]
        log(f"load for {args.seconds:.0f} s; faults: {faults(args.seconds)}")
        started = time.monotonic()
        load_start = datetime.now(UTC)
        for client in clients:
            client.start()
        fault_thread = threading.Thread(
            target=run_faults, args=(stack, args.seconds, started, stop_event), daemon=True
        )
        fault_thread.start()
        time.sleep(max(0.0, started + args.seconds - time.monotonic()))
        stop_event.set()
        fault_thread.join()
        for client in clients:
            client.join()
        log("load stopped; settling")
        settle(stack, args.settle)
        for hostname, *_ in NODES:
            stack.stop(f"agent-{hostname}")
        wait(lambda: stack.redis_llen("telemetry") == 0, 60)
        time.sleep(3 * POLL_SECONDS)  # the last drain commits
        for process in ("beat", "worker", "web"):
            stack.stop(process)
        remetered, charges = meter(load_start)
        log(f"requests: {summary(clients)}")
        log(f"jobs: {job_summary()}")
        checks = check(folder, [a for c in clients for a in c.answers], remetered, charges)
    finally:
        stack.stop_all()
        if not args.keep:
            drop_database(args.postgres, name)
    from bench.soak.invariants import table

    print(table(checks), flush=True)
    broken = [c.name for c in checks if not c.ok]
    log(f"{len(broken)} invariants broken" if broken else "all invariants kept")
    return 1 if broken else 0


def main() -> None:
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)), help="load"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=float(os.environ.get("SOAK_SETTLE_SECONDS", 360)),
        help="most seconds to wait after the load for every job to finish",
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get("SOAK_POSTGRES", "postgres://postgres@127.0.0.1:5432"),
        help="PostgreSQL server where the soak creates (and drops) its database",
    )
    parser.add_argument("--keep", action="store_true", help="keep the soak database")
    sys.exit(soak(parser.parse_args()))


if __name__ == "__main__":
    main()
