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


def add_months(month: date, count: int) -> date:
    index = month.year * 12 + month.month - 1 + count
    return date(index // 12, index % 12 + 1, 1)


def parse_period(text: str | None, *, now: datetime, months_ahead: int = 0) -> date:
    """'YYYY-MM' -> first day of that month; refuses malformed months and months past the
    current one plus `months_ahead` (reads: none; budgets are planned ahead)."""
    match = PERIOD_PATTERN.match(text or "")
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise ApplicationError(
            "period must be a month written YYYY-MM, e.g. 2026-11.", code="invalid_period"
        )
    month = date(int(match.group(1)), int(match.group(2)), 1)
    latest = add_months(month_start(now), months_ahead)
    if month > latest and not months_ahead:
        raise ApplicationError(
            f"{text} is in the future: nothing has been used yet.", code="future_period"
        )
    if month > latest:
        raise ApplicationError(
            f"{text} is too far ahead: this can be set up to {months_ahead} months ahead, "
            f"until {latest:%Y-%m}.",
            code="future_period",
        )
    return month
