"""Submitting, listing, following and cancelling jobs."""

import json
import sys
import time
from datetime import UTC, datetime

import click

from portal_cli import output
from portal_cli.base import EXIT_REFUSED, Context, cli, command, money
from portal_cli.times import DURATION, local

# Job statuses after which nothing changes (a preempted job is requeued, so it is not one).
FINISHED = ("succeeded", "failed", "cancelled")
WAITING = ("queued", "requeued")

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
            ("Cost so far", money(job.get("cost"), job.get("currency"))),
            ("Estimated cost", money(job.get("estimated_cost"), job.get("currency"))),
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
    ctx.show(rows, lambda: output.print_table(rows, JOB_COLUMNS, empty="No jobs."))


@command(jobs, "show")
@click.argument("job_id", type=int)
def jobs_show(ctx: Context, job_id):
    """One job: status, why it waits and when it should start, cost."""
    job = ctx.client.get(f"jobs/{job_id}/")
    ctx.show(job, lambda: _print_job(job))


@command(jobs, "cancel")
@click.argument("job_id", type=int)
@click.option("--reason", default="")
def jobs_cancel(ctx: Context, job_id, reason):
    """Cancel a job (a running one is stopped)."""
    job = ctx.client.post(f"jobs/{job_id}/cancel/", {"reason": reason})
    ctx.show(job, lambda: click.echo(f"Job {job['id']} is {job['status']}."))


@command(jobs, "log")
@click.argument("job_id", type=int)
def jobs_log(ctx: Context, job_id):
    """The last lines of a job's output."""
    log = ctx.client.get(f"jobs/{job_id}/log/")
    ctx.show(log, lambda: click.echo(log["log_tail"], nl=False))


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
