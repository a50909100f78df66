"""What the client prints: JSON for scripts, aligned tables for people, errors on stderr."""

import json
from collections.abc import Callable, Sequence

import click

Column = tuple[str, Callable[[dict], object]]


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def print_table(rows: Sequence[dict], columns: Sequence[Column], *, empty: str) -> None:
    if not rows:
        click.echo(empty)
        return
    headers = [name for name, _ in columns]
    cells = [["" if (v := get(row)) is None else str(v) for _, get in columns] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def print_fields(pairs: Sequence[tuple[str, object]]) -> None:
    width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        if value not in (None, ""):
            click.echo(f"{key.ljust(width)}  {value}")


def print_error(message: str, *, as_json: bool, data: dict | None = None) -> None:
    if as_json:
        click.echo(json.dumps({"error": data or {"message": message}}), err=True)
    else:
        click.echo(click.style("Error: ", fg="red", bold=True) + message, err=True)


def describe_detail(detail) -> list[str]:
    """The API's field errors as 'field: message' lines."""
    lines = []
    if isinstance(detail, dict):
        for key, value in detail.items():
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            elif isinstance(value, dict):
                value = "; ".join(describe_detail(value))
            lines.append(f"{key}: {value}")
    elif isinstance(detail, list):
        lines.extend(str(v) for v in detail)
    return lines
