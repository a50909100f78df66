"""The reader's time zone: which zone a request or an e-mail is in, how a time typed into a form
is read, and how days are laid out.

Every page is rendered in the reader's zone (apps.teams.middleware activates it for each
request): `portal.formatting.format_when` and the `when` filter name it ("Dec 5, 2026, 18:00
EST"), Django forms read a typed date-time in it, and calendars cut days at its midnights.
Times are stored and sent by the API in UTC.

The zone is the one chosen on the user's settings page, else the one the browser reports (the
`portal_tz` cookie static/js/portal.js sets), else settings.TIME_ZONE.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django import forms
from django.utils import timezone
from django.utils.functional import lazy

BROWSER_ZONE_COOKIE = "portal_tz"
# How a datetime-local input sends its value (seconds optional).
LOCAL_INPUT_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S")
LOCAL_INPUT_FORMAT = "%Y-%m-%dT%H:%M"


@cache
def zone_names() -> tuple[str, ...]:
    """IANA zone names a user may choose, sorted ("Africa/Abidjan" ... "UTC")."""
    return tuple(sorted(name for name in available_timezones() if "/" in name or name == "UTC"))


def zone_or_none(name: str | None) -> ZoneInfo | None:
    """The zone of an IANA name ("America/New_York"), or None when it is empty or unknown."""
    if not name or len(name) > 64 or name not in zone_names():
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def current_zone() -> ZoneInfo:
    """The zone the current request (or `in_zone`) renders in."""
    zone = timezone.get_current_timezone()
    return zone if isinstance(zone, ZoneInfo) else ZoneInfo(str(zone))


def zone_abbreviation(moment: datetime | None = None) -> str:
    """The short name of the current zone at `moment` (default: now): "EST", "EDT", "UTC".
    Labels next to inputs and on chart axes use it."""
    return timezone.localtime(moment or timezone.now()).tzname() or current_zone().key


@contextmanager
def in_zone(name: str | None) -> Iterator[ZoneInfo]:
    """Render in the zone `name` (an IANA name; unknown or empty: the server's zone) for the
    block: e-mails are written in their recipient's zone this way."""
    zone = zone_or_none(name) or ZoneInfo(timezone.get_default_timezone_name())
    with timezone.override(zone):
        yield zone


def parse_local(text: str) -> datetime:
    """A wall-clock time typed in the current zone ("2026-12-05T18:00", as a datetime-local
    input sends it) as an aware datetime. A time that does not exist (skipped by a DST change)
    or is ambiguous is read as the clock shows it first (fold 0), like Django's forms.
    ValueError with a message people can act on when the text is no such time."""
    text = (text or "").strip()
    for fmt in LOCAL_INPUT_FORMATS:
        try:
            naive = datetime.strptime(text, fmt)
        except ValueError:
            continue
        return timezone.make_aware(naive, current_zone())
    raise ValueError(
        f"“{text[:40]}” is not a date and time; give it as YYYY-MM-DD HH:MM ({current_zone().key})."
    )


def local_input_value(moment: datetime | None) -> str:
    """An aware time as a datetime-local input shows it, in the current zone."""
    if moment is None:
        return ""
    return timezone.localtime(moment).strftime(LOCAL_INPUT_FORMAT)


def local_day(moment: datetime) -> date:
    """The calendar day of `moment` in the current zone."""
    return timezone.localtime(moment).date()


def day_start(day: date) -> datetime:
    """Midnight starting `day` in the current zone, as an aware UTC time (Python subtracts and
    compares two times of one zone by their wall clocks, which is wrong across a DST change)."""
    return timezone.make_aware(datetime.combine(day, time()), current_zone()).astimezone(UTC)


def local_days(first: date, count: int) -> list[tuple[date, datetime, datetime]]:
    """`count` days from `first` in the current zone as (day, start, end): a day around a DST
    change is 23 or 25 hours long."""
    return [
        (day, day_start(day), day_start(day + timedelta(days=1)))
        for day in (first + timedelta(days=offset) for offset in range(count))
    ]


def reader_zone(request) -> dict:
    """Template context: the zone the page is in, for labels next to time inputs
    ("Start (America/New_York)") and the zone's short name now ("EST")."""
    return {"reader_zone": current_zone().key, "reader_zone_now": zone_abbreviation()}


def _zone_help() -> str:
    return f"Your time zone: {current_zone().key}."


class ZonedDateTimeField(forms.DateTimeField):
    """A date-time picker (datetime-local) read in the reader's zone, the zone named under it;
    cleaned to an aware datetime, stored in UTC like every other."""

    widget = forms.DateTimeInput(attrs={"type": "datetime-local"}, format=LOCAL_INPUT_FORMAT)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("help_text", lazy(_zone_help, str)())
        super().__init__(*args, **kwargs)
