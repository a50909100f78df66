"""Billing periods are UTC calendar months; these helpers turn between months and instants."""

import re
from datetime import UTC, date, datetime

from portal.exceptions import ApplicationError

PERIOD_PATTERN = re.compile(r"^(\d{4})-(\d{2})$")


def month_start(moment: datetime | date) -> date:
    return date(moment.year, moment.month, 1)


def next_month(month: date) -> date:
    return date(month.year + (month.month == 12), month.month % 12 + 1, 1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[start, end) of the month as aware UTC datetimes."""
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    following = next_month(month)
    return start, datetime(following.year, following.month, 1, tzinfo=UTC)


def parse_period(text: str | None, *, now: datetime) -> date:
    """'YYYY-MM' -> first day of that month; refuses malformed and future months."""
    match = PERIOD_PATTERN.match(text or "")
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise ApplicationError(
            "period must be a month written YYYY-MM, e.g. 2026-11.", code="invalid_period"
        )
    month = date(int(match.group(1)), int(match.group(2)), 1)
    if month > month_start(now):
        raise ApplicationError(
            f"{text} is in the future: nothing has been used yet.", code="future_period"
        )
    return month
