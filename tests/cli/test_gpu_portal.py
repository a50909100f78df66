"""The `gpu-portal` command-line client, run as a separate process against the live API
(pytest-django's live server on the test database) with real API tokens."""

import csv
import importlib
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import tomllib
from datetime import date, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openpyxl
import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.billing.exports import PLATFORM_COST_CENTER
from apps.billing.metering import meter_interval
from apps.billing.models import LedgerEntry
from apps.dashboards.demo import seed_billing_history
from apps.jobs.models import Job
from apps.reservations.models import Reservation
from apps.teams.models import User
from apps.teams.tokens import api_token_create
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
H100 = "H100-SXM-80GB"


@pytest.fixture
def demo(transactional_db):
    """The demo's teams, users, quotas and fleet, with an empty calendar."""
    call_command("seed_demo", "--without-reservations", stdout=open(os.devnull, "w"))  # noqa: SIM115


def token_for(username: str, scope: str = "write") -> str:
    _token, key = api_token_create(
        user=User.objects.get(username=username), name="cli", scope=scope, expires_in_days=30
    )
    return key


class Cli:
    """Runs `python -m portal_cli` the way a user's shell would: no Django settings, no
    database, only the portal's URL and a token (and an empty config directory)."""

    def __init__(self, url: str, token: str | None, config_home: Path) -> None:
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "DATABASE", "TEST_DATABASE", "GPU_PORTAL_"))
        }
        self.env |= {"GPU_PORTAL_URL": url, "XDG_CONFIG_HOME": str(config_home), "TZ": "UTC"}
        if token:
            self.env["GPU_PORTAL_TOKEN"] = token

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "portal_cli", *args]

    def __call__(self, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(*args), cwd=cwd, env=self.env, capture_output=True, text=True, timeout=60
        )

    def json(self, *args: str):
        # Before any `--`: what follows it is a job's command line.
        at = args.index("--") if "--" in args else len(args)
        result = self(*args[:at], "--json", *args[at:])
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def alice(demo, live_server, tmp_path):
    return Cli(live_server.url, token_for("alice"), tmp_path / "config")


def test_free_then_book_the_first_free_slot(alice):
    free = alice.json("free", "--model", H100, "--count", "2", "--duration", "2h")
    assert free["count"] == 2 and free["slots"], free
    first = free["slots"][0]

    booked = alice.json(
        "book", "-t", "vision", "-m", H100, "-n", "2", "-d", "2h", "--purpose", "cli"
    )

    reservation = Reservation.objects.get(pk=booked["id"])
    assert reservation.created_by.username == "alice" and reservation.team.slug == "vision"
    assert reservation.count == 2 and reservation.purpose == "cli"
    assert reservation.end - reservation.start == timedelta(hours=2)
    assert reservation.start.isoformat().replace("+00:00", "Z") == first["start"]
    assert reservation.holdings.filter(active=True).count() == 2
    assert len(booked["gpus"]) == 2


def test_bookings_are_listed_extended_and_cancelled(alice):
    start = (timezone.now() + timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    booked = alice.json(
        "book", "-t", "vision", "-m", H100, "-n", "1", "-d", "1h", "--start", start.isoformat()
    )
    booking_id = booked["id"]
    assert Reservation.objects.get(pk=booking_id).start == start

    listed = alice.json("bookings", "list", "--team", "vision")
    assert [b["id"] for b in listed] == [booking_id]
    table = alice("bookings", "list")
    assert table.returncode == 0
    header, row = table.stdout.splitlines()
    assert header.split()[:3] == ["ID", "TEAM", "GPUS"]
    assert row.split()[:5] == [str(booking_id), "vision", "1", "x", H100]

    result = alice("bookings", "extend", str(booking_id), "--by", "90m")
    assert result.returncode == 0, result.stderr
    assert Reservation.objects.get(pk=booking_id).end == start + timedelta(hours=2, minutes=30)
    assert f"Booking {booking_id} now ends" in result.stdout

    cancelled = alice.json("bookings", "cancel", str(booking_id), "--reason", "plans changed")
    assert cancelled["status"] == "cancelled"
    assert Reservation.objects.get(pk=booking_id).status == "cancelled"


def test_refusals_exit_non_zero_with_the_portals_message_and_write_nothing(alice, live_server):
    over = alice("book", "-t", "vision", "-m", H100, "-n", "9", "-d", "1h")
    assert over.returncode == 1
    assert "quota" in over.stderr.lower() and over.stdout == ""
    assert not Reservation.objects.exists()

    as_json = alice("book", "-t", "vision", "-m", H100, "-n", "9", "-d", "1h", "--json")
    error = json.loads(as_json.stderr)["error"]
    assert as_json.returncode == 1 and error["status"] == 403 and error["message"]

    bad_start = alice(
        "book", "-t", "vision", "-m", H100, "-d", "1h", "--start", "2020-01-01T00:00Z"
    )
    assert bad_start.returncode == 1
    assert "start: The start is in the past." in bad_start.stderr

    missing = alice("bookings", "show", "999999")
    assert missing.returncode == 1 and "404" in missing.stderr

    not_a_duration = alice("free", "-m", H100, "-d", "soon")
    assert not_a_duration.returncode == 2 and "is not a duration" in not_a_duration.stderr

    wrong_token = Cli(live_server.url, "gpt_not-a-real-key", alice.env["XDG_CONFIG_HOME"])
    refused = wrong_token("bookings", "list")
    assert refused.returncode == 1 and "Invalid token" in refused.stderr

    no_token = Cli(live_server.url, None, Path(alice.env["XDG_CONFIG_HOME"]))("bookings", "list")
    assert no_token.returncode == 3 and "GPU_PORTAL_TOKEN" in no_token.stderr

    nobody = Cli(f"http://127.0.0.1:{free_port()}", "gpt_x", Path(alice.env["XDG_CONFIG_HOME"]))
    unreachable = nobody("bookings", "list")
    assert unreachable.returncode == 3 and "did not answer" in unreachable.stderr


def test_a_read_only_token_reads_but_cannot_book(demo, live_server, tmp_path):
    reader = Cli(live_server.url, token_for("alice", scope="read"), tmp_path)
    assert reader.json("bookings", "list") == []
    refused = reader("book", "-t", "vision", "-m", H100, "-d", "1h")
    assert refused.returncode == 1 and "read-only" in refused.stderr
    assert not Reservation.objects.exists()


def test_the_token_and_url_come_from_the_config_file(demo, live_server, tmp_path):
    config = tmp_path / "gpu-portal" / "config.toml"
    config.parent.mkdir()
    config.write_text(f'url = "{live_server.url}"\ntoken = "{token_for("alice")}"\n')
    cli = Cli("unused", None, tmp_path)
    del cli.env["GPU_PORTAL_URL"]
    assert cli.json("bookings", "list") == []

    config.write_text("token = [\n")
    broken = cli("bookings", "list")
    assert broken.returncode == 3 and "config.toml" in broken.stderr


def test_jobs_are_submitted_listed_followed_and_cancelled(alice):
    submitted = alice.json(
        "jobs", "submit", "-t", "vision", "-n", "1", "-m", H100, "--max-runtime", "30m",
        "--name", "sweep", "-e", "SEED=3", "--", "python", "train.py", "--lr", "3e-4",
    )  # fmt: skip
    job = Job.objects.get(pk=submitted["id"])
    assert job.argv == ["python", "train.py", "--lr", "3e-4"] and job.env == {"SEED": "3"}
    assert job.max_runtime_seconds == 1800 and job.submitted_by.username == "alice"
    assert [j["id"] for j in alice.json("jobs", "list", "--mine")] == [job.pk]

    follower = subprocess.Popen(
        alice.command("jobs", "follow", str(job.pk), "--interval", "0.3", "--json"),
        cwd=ROOT,
        env=alice.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = json.loads(follower.stdout.readline())
        assert first["id"] == job.pk and first["status"] == job.status
        cancelled = alice("jobs", "cancel", str(job.pk))
        assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
        remaining, _ = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
    events = [first, *(json.loads(line) for line in remaining.splitlines())]
    assert events[-1]["status"] == "cancelled"
    assert follower.returncode == 1  # followed to its end, which was not a success
    assert Job.objects.get(pk=job.pk).status == "cancelled"


def test_follow_gives_up_after_its_timeout(alice):
    submitted = alice.json(
        "jobs", "submit", "-t", "vision", "-n", "1", "--max-runtime", "1h", "--", "sleep", "1"
    )
    started = time.monotonic()
    result = alice("jobs", "follow", str(submitted["id"]), "--interval", "0.2", "--timeout", "1")
    assert result.returncode == 1 and "still" in result.stderr
    assert time.monotonic() - started < 30
    assert f"job {submitted['id']} {submitted['status']}" in result.stdout


@pytest.fixture
def metered(demo):
    """A day of finished bookings, charged by the ledger."""
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    seed_billing_history(start=now - timedelta(hours=30), now=now)
    meter_interval(start=now - timedelta(hours=30), end=now)
    assert LedgerEntry.objects.exists()
    return now


def test_usage_shows_each_teams_hours_and_cost_as_the_ledger_has_them(
    metered, live_server, tmp_path
):
    finance = Cli(live_server.url, token_for("fran"), tmp_path)
    period = f"{metered - timedelta(hours=1):%Y-%m}"
    usage = finance.json("usage", "--period", period)
    assert usage["period"] == period and usage["teams"]
    month = date(int(period[:4]), int(period[5:]), 1)
    teams = [row for row in usage["teams"] if row["team"] != PLATFORM_COST_CENTER]
    assert teams
    for row in teams:
        seconds = sum(
            LedgerEntry.objects.filter(team__slug=row["team"], period__month=month).values_list(
                "gpu_seconds", flat=True
            )
        )
        assert Decimal(row["gpu_hours"]) == pytest.approx(
            Decimal(seconds) / 3600, abs=Decimal("0.01")
        )
        assert row["currency"] and Decimal(row["cost"]) > 0
    table = finance("usage", "--period", period)
    assert table.returncode == 0 and f"Usage in {period}" in table.stdout
    assert "GPU-HOURS" in table.stdout


def test_finance_downloads_the_chargeback_export_in_each_format(metered, live_server, tmp_path):
    finance = Cli(live_server.url, token_for("fran"), tmp_path)
    period = f"{metered - timedelta(hours=1):%Y-%m}"
    out = tmp_path / "exports"
    out.mkdir()

    saved = finance.json("export", "--period", period, "-o", str(out))
    path = Path(saved["file"])
    assert path.parent == out and path.name.startswith(f"chargeback-{period}")
    rows = list(csv.reader(io.StringIO(path.read_text())))
    assert len(rows) > 1 and saved["bytes"] == path.stat().st_size

    xlsx = finance.json("export", "-p", period, "--format", "xlsx", "-o", str(out / "c.xlsx"))
    workbook = openpyxl.load_workbook(xlsx["file"])
    assert len(workbook.sheetnames) >= 2

    focus = finance.json("export", "-p", period, "--format", "focus", "-o", str(out))
    header = next(csv.reader(io.StringIO(Path(focus["file"]).read_text())))
    assert "BilledCost" in header and "x_ReservationId" in header


def test_a_member_is_refused_the_export_and_no_file_is_left(demo, live_server, tmp_path):
    member = Cli(live_server.url, token_for("alice"), tmp_path)
    out = tmp_path / "exports"
    out.mkdir()
    result = member("export", "--period", f"{timezone.now():%Y-%m}", "-o", str(out))
    assert result.returncode == 1 and "403" in result.stderr
    assert list(out.iterdir()) == []


def test_the_client_runs_without_django():
    """It is installed on laptops that talk to the portal over HTTP only."""
    probe = "import sys, portal_cli.main; print('django' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_the_package_installs_the_gpu_portal_command():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["gpu-portal"] == "portal_cli.main:main"
    from setuptools import find_packages

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = find_packages(str(ROOT), include=include["packages"]["find"]["include"])
    assert "portal_cli" in packages
    module, _, function = project["scripts"]["gpu-portal"].partition(":")
    assert callable(getattr(importlib.import_module(module), function))


def test_the_installed_gpu_portal_command_books_gpus(alice):
    """The script `pip install` puts next to the interpreter (as `make demo` and `make test`
    install the package), not only `python -m portal_cli`."""
    script = Path(sys.executable).parent / "gpu-portal"
    assert script.exists(), "gpu-portal is not installed: run `pip install -e .` again"
    result = subprocess.run(
        [str(script), "book", "-t", "vision", "-m", H100, "-d", "1h", "--json"],
        env=alice.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert Reservation.objects.get(pk=json.loads(result.stdout)["id"]).count == 1


class BreaksOffMidway(BaseHTTPRequestHandler):
    """A portal whose export stops after the first part of what it promised."""

    def do_GET(self):  # noqa: N802 - the http.server interface
        self.send_response(200)
        self.send_header("Content-Type", "text/csv")
        self.send_header("Content-Disposition", 'attachment; filename="chargeback-2026-11.csv"')
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.write(b"BillingPeriodStart,BilledCost\n" * 100)
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, *args):
        pass


def test_an_export_that_breaks_off_leaves_no_file_and_exits_non_zero(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), BreaksOffMidway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cli = Cli(f"http://127.0.0.1:{server.server_port}", "gpt_any", tmp_path / "config")
        out = tmp_path / "exports"
        out.mkdir()
        result = cli("export", "--period", "2026-11", "-o", str(out))
    finally:
        server.shutdown()
    assert result.returncode == 3 and "broke off" in result.stderr
    assert list(out.iterdir()) == []
