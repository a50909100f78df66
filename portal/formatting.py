"""How the portal writes times, durations, counts and amounts for people: one rule for every page.

Times: `{{ value|when }}` renders a `<time datetime="...">` element reading
"Dec 4, 2026, 04:00 EST": in the reader's zone (the one active for the request, see
portal/timezones.py), always named, with the UTC time as its tooltip, so a booking reads the same
on every page. `when:"date"` and `when:"time"` give the date or the time alone, in the same
zone. Messages and e-mails call `format_when`, which follows the same zone.

Durations in human units ("10 min", "2 h 30 min"), numbers with thousands separators, amounts
with their currency, and counts with the right plural ("1 GPU", "2 GPUs").

The module is a template library registered as a builtin (settings.TEMPLATES), so every template
can use the filters without loading them; Python code (figure titles, messages) calls the same
functions.
"""

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from django import template
from django.conf import settings
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()

EMPTY = "—"
TIME_STYLES = ("datetime", "date", "time")


def _local(value: datetime) -> datetime:
    return timezone.localtime(value) if timezone.is_aware(value) else value


def format_when(value: datetime, style: str = "datetime") -> str:
    """The text of a moment in the current zone (the reader's, portal/timezones.py), the zone
    named: "Dec 4, 2026, 04:00 EST". static/js/portal.js writes the same format."""
    local = _local(value)
    zone = local.tzname() or "UTC"
    date = f"{local:%b} {local.day}, {local.year}"
    clock = f"{local:%H:%M} {zone}"
    if style == "date":
        return date
    if style == "time":
        return clock
    return f"{date}, {clock}"


def format_span(start: datetime, end: datetime) -> str:
    """[start, end) in the current zone, named: "Dec 5, 2026, 18:00 – 21:00 EST"; the end's
    date is written when it falls on another day."""
    local_start, local_end = _local(start), _local(end)
    if local_start.date() == local_end.date():
        return f"{format_when(start, 'date')}, {local_start:%H:%M} – {format_when(end, 'time')}"
    return f"{format_when(start)} – {format_when(end)}"


@register.filter(is_safe=True)
def when(value, style: str = "datetime"):
    """A <time> element for an aware datetime (empty values give "—")."""
    if value in (None, ""):
        return EMPTY
    if not isinstance(value, datetime):
        return value
    if style not in TIME_STYLES:
        raise template.TemplateSyntaxError(f"when: style must be one of {TIME_STYLES}")
    text = format_when(value, style)
    if timezone.is_aware(value):
        with timezone.override(UTC):
            in_utc = format_when(value)
        if in_utc != format_when(value):
            return format_html(
                '<time datetime="{}" data-style="{}" title="{}">{}</time>',
                value.isoformat(),
                style,
                in_utc,
                text,
            )
    return format_html(
        '<time datetime="{}" data-style="{}">{}</time>', value.isoformat(), style, text
    )


def format_duration(value) -> str:
    """Seconds (or a timedelta) in human units: "45 s", "10 min", "2 h 30 min", "3 d 4 h"."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{round(seconds)} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{sign}{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{sign}{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{sign}{days:,} d" + (f" {hours} h" if hours else "")


@register.filter
def duration(value):
    if value in (None, ""):
        return EMPTY
    try:
        return format_duration(value)
    except (TypeError, ValueError):
        return value


def format_number(value, places: int = 0) -> str:
    """A number with thousands separators and a fixed number of decimals (half-even)."""
    number = Decimal(str(value))
    quantum = Decimal(1).scaleb(-places)
    return f"{number.quantize(quantum, rounding=ROUND_HALF_EVEN):,.{places}f}"


@register.filter
def number(value, places=0):
    if value in (None, ""):
        return EMPTY
    try:
        return format_number(value, int(places))
    except (InvalidOperation, TypeError, ValueError):
        return value


def format_money(value, currency: str | None = None) -> str:
    """An amount with two decimals, thousands separators and its currency: "1,234.50 USD"."""
    return f"{format_number(value, 2)} {currency or settings.BILLING_CURRENCY}"


@register.filter
def money(value, currency=None):
    if value in (None, ""):
        return EMPTY
    try:
        return format_money(value, currency or None)
    except (InvalidOperation, TypeError, ValueError):
        return value


def format_price(value, currency: str | None = None) -> str:
    """A unit price keeps its own precision (at least cents): "2.1000 USD" per GPU-hour."""
    places = max(2, -Decimal(str(value)).as_tuple().exponent)
    return f"{format_number(value, places)} {currency or settings.BILLING_CURRENCY}"


@register.filter
def price(value, currency=None):
    if value in (None, ""):
        return EMPTY
    try:
        return format_price(value, currency or None)
    except (InvalidOperation, TypeError, ValueError):
        return value


def format_count(value, noun: str) -> str:
    """A count with its noun in the right number: "1 GPU", "2 GPUs", "1,024 GPUs". An
    irregular noun gives both forms: "entry,entries"."""
    singular, _, plural = noun.partition(",")
    plural = plural or f"{singular}s"
    n = int(value)
    return f"{n:,} {singular if n == 1 else plural}"


@register.filter
def counted(value, noun: str):
    if value in (None, ""):
        return EMPTY
    try:
        return format_count(value, noun)
    except (TypeError, ValueError):
        return value
