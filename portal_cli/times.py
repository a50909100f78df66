"""Durations and times as people type them, turned into what the API takes."""

import re
from datetime import UTC, datetime, timedelta

import click

_DURATION_PART = re.compile(r"(\d+)\s*([dhms])", re.IGNORECASE)
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> timedelta:
    """'4h', '90m', '1h30m', '2d' or 'HH:MM[:SS]'."""
    text = text.strip()
    clock = re.fullmatch(r"(\d+):(\d{2})(?::(\d{2}))?", text)
    if clock:
        hours, minutes, seconds = (int(g or 0) for g in clock.groups())
        return timedelta(hours=hours, minutes=minutes, seconds=seconds)
    parts = _DURATION_PART.findall(text)
    if not parts or _DURATION_PART.sub("", text).strip():
        raise ValueError(f"“{text}” is not a duration; write e.g. 4h, 90m, 1h30m, 2d or 04:00.")
    return timedelta(seconds=sum(int(n) * _UNITS[unit.lower()] for n, unit in parts))


def iso_duration(value: timedelta) -> str:
    """ISO 8601, which the API's duration fields read (e.g. P1DT2H30M0S)."""
    seconds = int(value.total_seconds())
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    return f"P{days}DT{hours}H{minutes}M{seconds}S"


def parse_time(text: str) -> datetime:
    """An ISO 8601 time; without a zone it is this computer's local time."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as error:
        raise ValueError(
            f"“{text}” is not a time; write e.g. 2026-12-03T09:00 (local) or 2026-12-03T09:00Z."
        ) from error
    if value.tzinfo is None:
        value = value.astimezone()  # the local zone of this computer
    return value


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def local(text: str | None) -> str:
    """An API time shown in this computer's zone, named."""
    if not text:
        return ""
    value = datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone()
    return value.strftime("%Y-%m-%d %H:%M %Z")


class DurationType(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, timedelta):
            return value
        try:
            duration = parse_duration(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)
        if duration <= timedelta(0):
            self.fail("The duration must be longer than zero.", param, ctx)
        return duration


class TimeType(click.ParamType):
    name = "time"

    def convert(self, value, param, ctx):
        if isinstance(value, datetime):
            return value
        try:
            return parse_time(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


DURATION = DurationType()
TIME = TimeType()
