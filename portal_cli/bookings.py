"""Finding free GPUs and booking them; listing, extending and cancelling bookings."""

from datetime import datetime

import click

from portal_cli import output
from portal_cli.base import Context, cli, command, money
from portal_cli.client import ApiError, Client
from portal_cli.times import DURATION, TIME, iso, iso_duration, local


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
    ("COST", lambda r: money(r.get("cost"), r.get("currency"))),
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
            ("Cost so far", money(booking.get("cost"), booking.get("currency"))),
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
    ctx.show(rows, lambda: output.print_table(rows, BOOKING_COLUMNS, empty="No bookings."))


@command(bookings, "show")
@click.argument("booking_id", type=int)
def bookings_show(ctx: Context, booking_id):
    """One booking, with the GPUs it holds and its cost so far."""
    booking = ctx.client.get(f"reservations/{booking_id}/")
    ctx.show(booking, lambda: _print_booking(booking))


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
    ctx.show(
        booking, lambda: click.echo(f"Booking {booking['id']} now ends {local(booking['end'])}.")
    )


@command(bookings, "cancel")
@click.argument("booking_id", type=int)
@click.option("--reason", default="", help="Told to the team.")
def bookings_cancel(ctx: Context, booking_id, reason):
    """Cancel a booking (a running one ends now)."""
    booking = ctx.client.post(f"reservations/{booking_id}/cancel/", {"reason": reason})
    ctx.show(booking, lambda: click.echo(f"Booking {booking['id']} is {booking['status']}."))
