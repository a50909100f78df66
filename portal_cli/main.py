"""The `gpu-portal` commands.

Exit codes: 0 done; 1 the portal refused (the API's code and message are printed), or a
followed job ended other than succeeded; 2 bad command-line input; 3 no token or the portal did
not answer.
"""

import functools
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import click

from portal_cli import output
from portal_cli.client import ApiError, Client, ConnectionProblem
from portal_cli.config import ConfigError, load_settings
from portal_cli.times import DURATION, TIME, iso, iso_duration, local

EXIT_REFUSED = 1
EXIT_UNREACHABLE = 3
# Job statuses after which nothing changes (a preempted job is requeued, so it is not one).
FINISHED = ("succeeded", "failed", "cancelled")
WAITING = ("queued", "requeued")
EXPORT_FORMATS = ("csv", "xlsx", "focus", "json")


def _money(amount: str | None, currency: str | None) -> str:
    """An API amount (an exact decimal string) with thousands separators and its currency."""
    if amount in (None, ""):
        return ""
    whole, _, cents = str(amount).partition(".")
    sign = "-" if whole.startswith("-") else ""
    grouped = f"{int(whole.lstrip('-') or 0):,}"
    return f"{sign}{grouped}{'.' + cents if cents else ''} {currency or ''}".rstrip()


def _hours(value: str) -> str:
    return f"{Decimal(value):,.2f}"


class Context:
    def __init__(self, url: str | None, token: str | None, as_json: bool) -> None:
        self.url = url
        self.token = token
        self.as_json = as_json
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            settings = load_settings(url=self.url, token=self.token)
            self._client = Client(settings.url, settings.token)
        return self._client


def command(group: click.Group, name: str | None = None, **kwargs):
    """A subcommand with `--json`, whose API and connection errors become a clear message on
    stderr and a non-zero exit code."""

    def decorate(func):
        @group.command(name, **kwargs)
        @click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
        @click.pass_obj
        @functools.wraps(func)
        def wrapper(ctx: Context, as_json: bool, **params):
            ctx.as_json = ctx.as_json or as_json
            try:
                return func(ctx, **params)
            except ApiError as error:
                message = f"{error.message} ({error.status} {error.code})"
                lines = output.describe_detail(error.detail)
                output.print_error(
                    "\n  ".join([message, *lines]), as_json=ctx.as_json, data=error.as_dict()
                )
                sys.exit(EXIT_REFUSED)
            except (ConfigError, ConnectionProblem) as error:
                output.print_error(str(error), as_json=ctx.as_json)
                sys.exit(EXIT_UNREACHABLE)

        return wrapper

    return decorate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="GPU_PORTAL_URL", help="The portal, e.g. https://gpus.example.org.")
@click.option("--token", envvar="GPU_PORTAL_TOKEN", help="API token (better: GPU_PORTAL_TOKEN).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
@click.version_option(package_name="gpu-portal")
@click.pass_context
def cli(click_ctx: click.Context, url: str | None, token: str | None, as_json: bool) -> None:
    """Book GPUs, run jobs and see their cost on the GPU portal from a terminal.

    The portal and token come from --url/--token, GPU_PORTAL_URL/GPU_PORTAL_TOKEN, or
    ~/.config/gpu-portal/config.toml (url = "...", token = "...").
    """
    click_ctx.obj = Context(url, token, as_json)


# Finding and booking GPUs


def _slot_row(slot: dict) -> dict:
    nodes = sorted({g["node"] for g in slot["gpus"]})
    return {
        "start": local(slot["start"]),
        "end": local(slot["end"]),
        "latest_start": local(slot["latest_start"]),
        "nodes": ", ".join(nodes),
    }


def _find_slots(client: Client, *, model, count, duration, after, same_node, limit) -> dict:
    return client.get(
        "availability/",
        gpu_model=model,
        count=count,
        duration=iso_duration(duration),
        after=iso(after) if after else None,
        same_node="true" if same_node else None,
        limit=limit,
    )


@command(cli, "free")
@click.option("--model", "-m", required=True, help="GPU model, e.g. H100-SXM-80GB.")
@click.option("--count", "-n", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--duration", "-d", type=DURATION, default="1h", show_default=True)
@click.option("--after", type=TIME, help="Not before this time (default: now).")
@click.option("--same-node", is_flag=True, help="All GPUs on one node.")
@click.option("--limit", type=click.IntRange(1, 20), default=5, show_default=True)
def free(ctx: Context, model, count, duration, after, same_node, limit):
    """Earliest slots where COUNT GPUs of a model are free for DURATION."""
    answer = _find_slots(
        ctx.client,
        model=model,
        count=count,
        duration=duration,
        after=after,
        same_node=same_node,
        limit=limit,
    )
    if ctx.as_json:
        output.print_json(answer)
        return
    click.echo(f"{answer['count']} x {answer['gpu_model']} for {answer['duration']}:")
    output.print_table(
        [_slot_row(s) for s in answer["slots"]],
        [
            ("START", lambda r: r["start"]),
            ("END", lambda r: r["end"]),
            ("LATEST START", lambda r: r["latest_start"]),
            ("NODES", lambda r: r["nodes"]),
        ],
        empty="No free slot in the booking window.",
    )


BOOKING_COLUMNS = [
    ("ID", lambda r: r["id"]),
    ("TEAM", lambda r: r["team"]),
    ("GPUS", lambda r: f"{r['count']} x {r['gpu_model']}"),
    ("START", lambda r: local(r["start"])),
    ("END", lambda r: local(r["end"])),
    ("STATUS", lambda r: r["status"] + (" (over quota)" if r.get("over_quota") else "")),
    ("COST", lambda r: _money(r.get("cost"), r.get("currency"))),
    ("PURPOSE", lambda r: r["purpose"]),
]


def _print_booking(booking: dict) -> None:
    gpus = ", ".join(f"{g['node']}:{g['index']}" for g in booking.get("gpus", []))
    output.print_fields(
        [
            ("Booking", booking["id"]),
            ("Team", booking["team"]),
            ("GPUs", f"{booking['count']} x {booking['gpu_model']}"),
            ("Held", gpus),
            ("Start", local(booking["start"])),
            ("End", local(booking["end"])),
            ("Status", booking["status"]),
            ("Over quota", "yes" if booking.get("over_quota") else ""),
            ("Purpose", booking.get("purpose")),
            ("Cost so far", _money(booking.get("cost"), booking.get("currency"))),
            ("Ended", booking.get("end_reason")),
        ]
    )


@command(cli, "book")
@click.option("--team", "-t", required=True, help="Team slug.")
@click.option("--model", "-m", required=True, help="GPU model, e.g. H100-SXM-80GB.")
@click.option("--count", "-n", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--duration", "-d", type=DURATION, required=True, help="e.g. 4h, 90m, 2d.")
@click.option("--start", type=TIME, help="When to start (default: the first free slot).")
@click.option("--same-node", is_flag=True, help="All GPUs on one node.")
@click.option("--purpose", default="", help="What the GPUs are for (shown to the team).")
def book(ctx: Context, team, model, count, duration, start, same_node, purpose):
    """Book COUNT GPUs of a model for DURATION, at START or the first free slot."""
    if start is None:
        slots = _find_slots(
            ctx.client,
            model=model,
            count=count,
            duration=duration,
            after=None,
            same_node=same_node,
            limit=1,
        )["slots"]
        if not slots:
            raise ApiError(409, "no_slot", f"No {count} x {model} free for {duration} to book.")
        start = datetime.fromisoformat(slots[0]["start"].replace("Z", "+00:00"))
    booking = ctx.client.post(
        "reservations/",
        {
            "team": team,
            "gpu_model": model,
            "count": count,
            "start": iso(start),
            "duration": iso_duration(duration),
            "same_node": same_node,
            "purpose": purpose,
        },
    )
    if ctx.as_json:
        output.print_json(booking)
        return
    click.echo(f"Booked {booking['count']} x {booking['gpu_model']} (booking {booking['id']}).")
    _print_booking(booking)


@cli.group()
def bookings():
    """List, show, extend and cancel bookings of your teams."""


@command(bookings, "list")
@click.option("--team", "-t", help="Only this team's.")
@click.option("--status", "-s", multiple=True, help="scheduled, active, ended, cancelled...")
@click.option("--mine", is_flag=True, help="Only bookings you made.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
def bookings_list(ctx: Context, team, status, mine, limit):
    """Bookings, latest start first."""
    rows = ctx.client.list(
        "reservations/",
        limit=limit,
        team=team,
        status=list(status),
        mine="true" if mine else None,
    )
    if ctx.as_json:
        output.print_json(rows)
    else:
        output.print_table(rows, BOOKING_COLUMNS, empty="No bookings.")


@command(bookings, "show")
@click.argument("booking_id", type=int)
def bookings_show(ctx: Context, booking_id):
    """One booking, with the GPUs it holds and its cost so far."""
    booking = ctx.client.get(f"reservations/{booking_id}/")
    if ctx.as_json:
        output.print_json(booking)
    else:
        _print_booking(booking)


@command(bookings, "extend")
@click.argument("booking_id", type=int)
@click.option("--end", type=TIME, help="The new end.")
@click.option("--by", type=DURATION, help="Add this much to the current end, e.g. 1h.")
def bookings_extend(ctx: Context, booking_id, end, by):
    """Move a booking's end later (--end TIME or --by DURATION)."""
    if (end is None) == (by is None):
        raise click.UsageError("Give either --end or --by.")
    if by is not None:
        current = ctx.client.get(f"reservations/{booking_id}/")
        end = datetime.fromisoformat(current["end"].replace("Z", "+00:00")) + by
    booking = ctx.client.post(f"reservations/{booking_id}/extend/", {"end": iso(end)})
    if ctx.as_json:
        output.print_json(booking)
    else:
        click.echo(f"Booking {booking['id']} now ends {local(booking['end'])}.")


@command(bookings, "cancel")
@click.argument("booking_id", type=int)
@click.option("--reason", default="", help="Told to the team.")
def bookings_cancel(ctx: Context, booking_id, reason):
    """Cancel a booking (a running one ends now)."""
    booking = ctx.client.post(f"reservations/{booking_id}/cancel/", {"reason": reason})
    if ctx.as_json:
        output.print_json(booking)
    else:
        click.echo(f"Booking {booking['id']} is {booking['status']}.")


# Jobs

JOB_COLUMNS = [
    ("ID", lambda r: r["id"]),
    ("TEAM", lambda r: r["team"]),
    ("NAME", lambda r: r["name"]),
    ("GPUS", lambda r: f"{r['gpu_count']} x {r['gpu_model'] or 'any'}"),
    ("CLASS", lambda r: r["priority_class"]),
    ("STATUS", lambda r: r["status"]),
    ("SUBMITTED", lambda r: local(r["submitted_at"])),
    ("WHY WAITING", lambda r: r["pending_message"] if r["status"] in WAITING else ""),
]


def _print_job(job: dict) -> None:
    waiting = job["status"] in WAITING
    output.print_fields(
        [
            ("Job", job["id"]),
            ("Name", job["name"]),
            ("Team", job["team"]),
            ("Command", " ".join(job["argv"])),
            ("GPUs", f"{job['gpu_count']} x {job['gpu_model'] or 'any model'}"),
            ("Class", job["priority_class"]),
            ("Status", job["status"]),
            ("Why waiting", job["pending_message"] if waiting else ""),
            ("Estimated start", local(job["estimated_start"]) if waiting else ""),
            ("Node", job.get("node")),
            ("Started", local(job["started_at"])),
            ("Finished", local(job["finished_at"])),
            ("Exit code", job["exit_code"]),
            ("Cost so far", _money(job.get("cost"), job.get("currency"))),
            ("Estimated cost", _money(job.get("estimated_cost"), job.get("currency"))),
        ]
    )


def _env_pairs(values: tuple[str, ...]) -> dict:
    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"“{item}” is not NAME=VALUE.", param_hint="--env")
        env[key] = value
    return env


@cli.group()
def jobs():
    """Submit, list, follow and cancel jobs of your teams."""


@command(jobs, "submit")
@click.option("--team", "-t", required=True, help="Team slug.")
@click.option("--gpus", "-n", "gpu_count", type=click.IntRange(min=1), required=True)
@click.option("--model", "-m", help="GPU model (default: any).")
@click.option("--max-runtime", type=DURATION, required=True, help="e.g. 2h; stopped after it.")
@click.option(
    "--class",
    "priority_class",
    type=click.Choice(["guaranteed", "over_quota", "preemptible"]),
    help="Priority class (the portal's default: over_quota).",
)
@click.option("--name", default="", help="A name to find it by.")
@click.option("--workdir", default="", help="Working directory on the node.")
@click.option("--env", "-e", multiple=True, help="NAME=VALUE, repeatable.")
@click.option("--reservation", type=int, help="Run inside this booking.")
@click.option("--checkpointable", is_flag=True, help="Saves on SIGTERM, resumes when requeued.")
@click.option("--spread", is_flag=True, help="May span nodes (default: one node).")
@click.option("--follow", "-f", is_flag=True, help="Then follow it until it ends.")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def jobs_submit(ctx: Context, argv, follow, **options):
    """Submit ARGV (after --) as a job, e.g. `gpu-portal jobs submit -t vision -n 2
    --max-runtime 2h -- python train.py`."""
    body = {
        "team": options["team"],
        "argv": list(argv),
        "gpu_count": options["gpu_count"],
        "gpu_model": options["model"],
        "max_runtime_seconds": int(options["max_runtime"].total_seconds()),
        "name": options["name"],
        "workdir": options["workdir"],
        "env": _env_pairs(options["env"]),
        "reservation": options["reservation"],
        "checkpointable": options["checkpointable"],
        "same_node": not options["spread"],
    }
    if options["priority_class"]:
        body["priority_class"] = options["priority_class"]
    job = ctx.client.post("jobs/", body)
    if not ctx.as_json:
        click.echo(f"Submitted job {job['id']}.")
    if follow:
        _follow(ctx, job["id"], interval=5.0, timeout=None)
    elif ctx.as_json:
        output.print_json(job)
    else:
        _print_job(job)


@command(jobs, "list")
@click.option("--team", "-t", help="Only this team's.")
@click.option("--status", "-s", multiple=True, help="queued, running, succeeded, failed...")
@click.option("--mine", is_flag=True, help="Only jobs you submitted.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
def jobs_list(ctx: Context, team, status, mine, limit):
    """Jobs, latest submitted first."""
    rows = ctx.client.list(
        "jobs/", limit=limit, team=team, status=list(status), mine="true" if mine else None
    )
    if ctx.as_json:
        output.print_json(rows)
    else:
        output.print_table(rows, JOB_COLUMNS, empty="No jobs.")


@command(jobs, "show")
@click.argument("job_id", type=int)
def jobs_show(ctx: Context, job_id):
    """One job: status, why it waits and when it should start, cost."""
    job = ctx.client.get(f"jobs/{job_id}/")
    if ctx.as_json:
        output.print_json(job)
    else:
        _print_job(job)


@command(jobs, "cancel")
@click.argument("job_id", type=int)
@click.option("--reason", default="")
def jobs_cancel(ctx: Context, job_id, reason):
    """Cancel a job (a running one is stopped)."""
    job = ctx.client.post(f"jobs/{job_id}/cancel/", {"reason": reason})
    if ctx.as_json:
        output.print_json(job)
    else:
        click.echo(f"Job {job['id']} is {job['status']}.")


@command(jobs, "log")
@click.argument("job_id", type=int)
def jobs_log(ctx: Context, job_id):
    """The last lines of a job's output."""
    log = ctx.client.get(f"jobs/{job_id}/log/")
    if ctx.as_json:
        output.print_json(log)
    else:
        click.echo(log["log_tail"], nl=False)


def _follow(ctx: Context, job_id: int, *, interval: float, timeout: float | None) -> None:
    """Poll a job and print each change of status (and of why it waits) until it ends."""
    deadline = None if timeout is None else time.monotonic() + timeout
    seen = None
    while True:
        job = ctx.client.get(f"jobs/{job_id}/")
        state = (job["status"], job["pending_reason"], job["node"])
        if state != seen:
            seen = state
            if ctx.as_json:
                fields = ("id", "status", "pending_reason", "pending_message", "node", "exit_code")
                event = {"at": datetime.now(UTC).isoformat(), **{k: job.get(k) for k in fields}}
                click.echo(json.dumps(event))
            else:
                stamp = datetime.now().astimezone().strftime("%H:%M:%S %Z")
                extra = ""
                if job["status"] in WAITING and job["pending_message"]:
                    extra = f": {job['pending_message']}"
                elif job["node"] and job["status"] in ("dispatched", "running"):
                    extra = f" on {job['node']}"
                elif job["status"] in FINISHED and job["exit_code"] is not None:
                    extra = f" (exit code {job['exit_code']})"
                click.echo(f"{stamp}  job {job_id} {job['status']}{extra}")
        if job["status"] in FINISHED:
            if job["status"] != "succeeded":
                sys.exit(EXIT_REFUSED)
            return
        if deadline is not None and time.monotonic() >= deadline:
            output.print_error(
                f"Job {job_id} is still {job['status']} after {timeout:g} s.", as_json=ctx.as_json
            )
            sys.exit(EXIT_REFUSED)
        time.sleep(interval)


@command(jobs, "follow")
@click.argument("job_id", type=int)
@click.option("--interval", type=click.FloatRange(min=0.2), default=5.0, show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0), help="Give up after this many seconds.")
def jobs_follow(ctx: Context, job_id, interval, timeout):
    """Print a job's status changes until it ends; exits 0 only if it succeeded."""
    _follow(ctx, job_id, interval=interval, timeout=timeout)


# Usage, cost and exports


@command(cli, "usage")
@click.option("--period", "-p", help="Month, YYYY-MM (default: this one).")
@click.option("--team", "-t", help="Only this team.")
def usage(ctx: Context, period, team):
    """GPU-hours and cost per team for a month, with each team's budget."""
    answer = ctx.client.get("usage/", period=period, team=team)
    budgets = [
        b
        for b in ctx.client.list("budgets/", limit=500, team__slug=team)
        if b["period"] == answer["period"]
    ]
    if ctx.as_json:
        output.print_json({**answer, "budgets": [b["burn_down"] for b in budgets]})
        return
    state = "draft, still changing" if answer["draft"] else answer["status"]
    click.echo(f"Usage in {answer['period']} ({state}):")
    output.print_table(
        answer["teams"],
        [
            ("TEAM", lambda r: r["team"]),
            ("GPU-HOURS", lambda r: _hours(r["gpu_hours"])),
            ("BUSY", lambda r: _hours(r["busy_gpu_hours"])),
            ("HELD IDLE", lambda r: _hours(r["held_idle_gpu_hours"])),
            ("COST", lambda r: _money(r.get("cost"), r.get("currency"))),
            ("OVER QUOTA", lambda r: _money(r.get("over_quota_cost"), r.get("currency"))),
        ],
        empty="No usage recorded this month.",
    )
    if budgets:
        click.echo("")
        click.echo("Budgets:")
        output.print_table(
            [b["burn_down"] for b in budgets],
            [
                ("TEAM", lambda r: r["team"]),
                ("BUDGET", lambda r: r["budget"]),
                ("SPENT", lambda r: r["spent"]),
                ("BOOKED", lambda r: r["booked"]),
                ("LEFT", lambda r: r["left"]),
                ("PROJECTED", lambda r: r["projected"]),
                ("ENFORCEMENT", lambda r: r["enforcement"]),
            ],
            empty="",
        )


@command(cli, "export")
@click.option("--period", "-p", required=True, help="Month, YYYY-MM.")
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS), default="csv")
@click.option("--detail", is_flag=True, help="Per GPU and booking/job, not per team and day.")
@click.option("--team", "-t", help="Only this team.")
@click.option("--focus-version", type=click.Choice(["1.2", "1.3"]), help="For --format focus.")
@click.option(
    "--output",
    "-o",
    "target",
    type=click.Path(dir_okay=True, writable=True, path_type=Path),
    help="File or folder (default: the portal's file name here).",
)
def export(ctx: Context, period, fmt, detail, team, focus_version, target):
    """Download a month's chargeback export (finance and platform admins)."""
    name, chunks = ctx.client.download(
        "chargeback/",
        period=period,
        format=fmt,
        level="detail" if detail else None,
        team=team,
        focus_version=focus_version,
    )
    name = name or f"chargeback-{period}.{'csv' if fmt == 'focus' else fmt}"
    if target is None:
        target = Path(name)
    elif target.is_dir():
        target = target / name
    # Written under a temporary name and renamed when complete: a download that breaks off
    # leaves no short file that looks whole.
    handle, partial = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        size = 0
        with os.fdopen(handle, "wb") as file:
            for chunk in chunks:
                file.write(chunk)
                size += len(chunk)
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    if ctx.as_json:
        output.print_json({"file": str(target), "bytes": size, "format": fmt, "period": period})
    else:
        click.echo(f"Saved {target} ({size:,} bytes).")


def main() -> None:
    cli(prog_name="gpu-portal")


if __name__ == "__main__":
    main()
