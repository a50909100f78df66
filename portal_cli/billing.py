"""Usage, cost and budgets of teams, and the chargeback export."""

import os
import tempfile
from pathlib import Path

import click

from portal_cli import output
from portal_cli.base import Context, cli, command, hours, money

EXPORT_FORMATS = ("csv", "xlsx", "focus", "json")


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
            ("GPU-HOURS", lambda r: hours(r["gpu_hours"])),
            ("BUSY", lambda r: hours(r["busy_gpu_hours"])),
            ("HELD IDLE", lambda r: hours(r["held_idle_gpu_hours"])),
            ("COST", lambda r: money(r.get("cost"), r.get("currency"))),
            ("OVER QUOTA", lambda r: money(r.get("over_quota_cost"), r.get("currency"))),
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
    ctx.show(
        {"file": str(target), "bytes": size, "format": fmt, "period": period},
        lambda: click.echo(f"Saved {target} ({size:,} bytes)."),
    )
