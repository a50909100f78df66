"""Budget forecasts: where a team's month ends at its recent pace, with a range. A unit's
budget is forecast the same way over all the teams below it together (`budget_forecast`).

**Run-rate.** What the team was charged per UTC day over the last `BILLING_FORECAST_DAYS`
complete days (7 by default; usage of every kind, bookings and jobs, not adjustments: they are
one-off corrections), as a mean with a range of one standard deviation either side (low never
below zero). Days without charges count as zero: a team that stopped spending is forecast to
keep not spending.

**Each day left in the month** is expected to cost the run-rate (a fraction of it for the rest
of today), but never less than what the team has already booked for that day, priced as it will
be charged (`pricing.price_holding`). The run-rate already includes the team's usual bookings,
so bookings are a floor, not an addition: adding them would count the same hours twice.

**Projected month end** = spent so far + the expected days; low and high alike from the low
and high rates. The budget is exceeded on the first day whose running total passes it.

**Left.** One definition everywhere (budgets page, API, statement): left = budget - spent, in
cents, from the same rounded spend the statement shows; the bookings still to come are shown
beside it as "left after bookings" = left - booked.
"""

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from statistics import pstdev

from django.conf import settings
from django.db.models.functions import TruncDate

from apps.billing.choices import ChargeSource
from apps.billing.models import BillingPeriod, Budget, LedgerEntry
from apps.billing.money import ExactSum
from apps.billing.periods import month_bounds
from apps.billing.pricing import RateBook, energy_per_gpu_hour, price_holding
from apps.reservations.holdings import bookings_holding

ZERO = Decimal(0)
CENT = Decimal("0.01")
DAY = timedelta(days=1)


@dataclass
class Forecast:
    """A team's month (or a unit's: all the teams below it together): what it spent, has
    booked, has left, and where it is heading."""

    team: str
    period: str
    budget: Decimal | None
    enforcement: str | None
    spent: Decimal
    booked: Decimal
    run_rate: Decimal
    run_rate_low: Decimal
    run_rate_high: Decimal
    window_days: int
    projected: Decimal
    projected_low: Decimal
    projected_high: Decimal
    exceeds_on: date | None = None
    exceeds_on_earliest: date | None = None
    exceeds_on_latest: date | None = None
    # (day, expected, low, high): the running total at the end of each day left in the month.
    days: list = field(default_factory=list)
    unit: str = ""  # a unit's forecast: the unit's path ("Organisation / Research"); team empty

    @property
    def who(self) -> str:
        """How messages name the budget's owner: the team's slug, or "unit <path>"."""
        return f"unit {self.unit}" if self.unit else self.team

    @property
    def left(self) -> Decimal | None:
        return None if self.budget is None else self.budget - self.spent

    @property
    def left_after_bookings(self) -> Decimal | None:
        return None if self.budget is None else self.budget - self.spent - self.booked

    @property
    def message(self) -> str:
        """One sentence for the page, the API and the alert email."""
        if self.budget is None:
            return ""
        if self.spent > self.budget:
            return f"{self.who} has exceeded its {self.period} budget."
        if self.exceeds_on is None:
            if self.exceeds_on_earliest is not None:
                return (
                    f"At this rate {self.who} stays within its {self.period} budget; at the "
                    f"high end of its range it would exceed it on {self.exceeds_on_earliest:%b %d}."
                )
            return f"At this rate {self.who} stays within its {self.period} budget."
        return f"At this rate {self.who} exceeds its budget on {self.exceeds_on:%b %d}."

    def as_dict(self) -> dict:
        """The figures (Decimals in cents; dates as ISO strings)."""
        money = {
            name: None if value is None else value.quantize(CENT)
            for name, value in (
                ("budget", self.budget),
                ("spent", self.spent),
                ("booked", self.booked),
                ("left", self.left),
                ("left_after_bookings", self.left_after_bookings),
                ("run_rate_per_day", self.run_rate),
                ("run_rate_low", self.run_rate_low),
                ("run_rate_high", self.run_rate_high),
                ("projected", self.projected),
                ("projected_low", self.projected_low),
                ("projected_high", self.projected_high),
            )
        }
        return {
            "team": self.team,
            **({"unit": self.unit} if self.unit else {}),
            "period": self.period,
            "enforcement": self.enforcement,
            **money,
            "window_days": self.window_days,
            "exceeds_on": self.exceeds_on.isoformat() if self.exceeds_on else None,
            "exceeds_on_earliest": (
                self.exceeds_on_earliest.isoformat() if self.exceeds_on_earliest else None
            ),
            "exceeds_on_latest": (
                self.exceeds_on_latest.isoformat() if self.exceeds_on_latest else None
            ),
            "message": self.message,
        }


def _usage(team_ids, start: date, end: date):
    """These teams' usage lines (not adjustments) over the UTC days [start, end), with `day`."""
    return (
        LedgerEntry.objects.filter(
            team_id__in=list(team_ids),
            slice_start__gte=datetime.combine(start, datetime.min.time(), UTC),
            slice_start__lt=datetime.combine(end, datetime.min.time(), UTC),
        )
        .exclude(source=ChargeSource.ADJUSTMENT)
        .annotate(day=TruncDate("slice_start", tzinfo=UTC))
    )


def daily_charges(*, team_ids, start: date, end: date) -> list[Decimal]:
    """These teams' usage charges together per UTC day over [start, end), zero for days
    without any."""
    rows = _usage(team_ids, start, end).values("day").annotate(total=ExactSum("cost")).order_by()
    by_day = {row["day"]: row["total"] or ZERO for row in rows}
    return [by_day.get(start + timedelta(days=i), ZERO) for i in range((end - start).days)]


def run_rate(daily: list[Decimal]) -> tuple[Decimal, Decimal, Decimal]:
    """(mean, low, high) per day: the mean of the daily charges, one standard deviation
    either side (low at least zero)."""
    if not daily:
        return ZERO, ZERO, ZERO
    mean, spread = sum(daily, ZERO) / len(daily), pstdev(daily)
    return (
        mean.quantize(CENT),
        max(mean - spread, ZERO).quantize(CENT),
        (mean + spread).quantize(CENT),
    )


def booked_by_day(
    *, team_ids, since: datetime, until: datetime, now: datetime
) -> dict[date, Decimal]:
    """What these teams' bookings will cost per UTC day over [since, until), exact, priced as
    they will be charged (each GPU above the guarantee at the over-quota multiplier)."""
    return _priced_by_day(
        _bookings_of(team_ids, since, until),
        since=since,
        until=until,
        now=now,
        rates=RateBook(start=since, end=until),
        energy={},
    )


def _bookings_of(team_ids, since: datetime, until: datetime) -> list:
    return list(
        bookings_holding(since, until)
        .filter(reservation__team_id__in=list(team_ids))
        .select_related("gpu__model", "reservation")
    )


def _priced_by_day(
    holdings, *, since: datetime, until: datetime, now: datetime, rates: RateBook, energy: dict
) -> dict[date, Decimal]:
    by_day: dict[date, Decimal] = {}
    for holding in holdings:
        model = holding.gpu.model
        if model.pk not in energy:
            energy[model.pk] = energy_per_gpu_hour(model.pk, now=now)
        cursor, end = max(holding.start, since), min(holding.end, until)
        while cursor < end:
            day = cursor.astimezone(UTC).date()
            day_end = min(datetime.combine(day + DAY, datetime.min.time(), UTC), end)
            price = price_holding(
                gpu_model=model,
                count=1,
                start=cursor,
                end=day_end,
                over_quota_gpus=int(holding.over_quota),
                rates=rates,
                kwh_per_gpu_hour=energy[model.pk],
            )
            by_day[day] = by_day.get(day, ZERO) + price.exact_total
            cursor = day_end
    return by_day


class ForecastReads:
    """The ledger and bookings that the forecasts of several owners (teams, or units' teams
    together) read, read once for all their teams, so that a page drawing a forecast per team
    makes the same few queries for three teams as for two hundred. Each owner's figures are
    the same as `teams_forecast` reads alone: its daily charges are the sums of its teams'
    exact daily sums, its bookings are priced one by one in the order they were read."""

    def __init__(self, *, team_ids, period: BillingPeriod, now: datetime, window_days=None):
        self.window_days = window_days or settings.BILLING_FORECAST_DAYS
        self.now = now
        start, self.until = month_bounds(period.month)
        self.since = max(now, start)
        today = now.astimezone(UTC).date()
        first = today - timedelta(days=self.window_days)
        self._days = [first + timedelta(days=i) for i in range(self.window_days)]
        self._charged: dict[int, dict[date, Decimal]] = {}
        for row in (
            _usage(team_ids, first, today)
            .values("team_id", "day")
            .annotate(total=ExactSum("cost"))
            .order_by()
        ):
            self._charged.setdefault(row["team_id"], {})[row["day"]] = row["total"] or ZERO
        self._holdings = (
            _bookings_of(team_ids, self.since, self.until) if self.since < self.until else []
        )
        self._rates = RateBook(start=self.since, end=self.until) if self._holdings else None
        self._energy: dict[int, Decimal] = {}

    def daily(self, team_ids) -> list[Decimal]:
        """`daily_charges` of these teams over the window."""
        found = [self._charged.get(team_id, {}) for team_id in team_ids]
        return [sum((f.get(day, ZERO) for f in found), ZERO) for day in self._days]

    def booked(self, team_ids) -> dict[date, Decimal]:
        """`booked_by_day` of these teams from now to the end of the month."""
        ids = set(team_ids)
        holdings = [h for h in self._holdings if h.reservation.team_id in ids]
        if not holdings:
            return {}
        return _priced_by_day(
            holdings, since=self.since, until=self.until, now=self.now, rates=self._rates,
            energy=self._energy,
        )  # fmt: skip


def forecast(
    *,
    team,
    period: BillingPeriod,
    now: datetime,
    window_days: int | None = None,
    charged=None,
    budgets=None,
    reads=None,
):
    """The team's month (see the module docstring); `charged` (`selectors.charged_by_team`),
    `budgets` (the period's budgets by team id) and `reads` (`ForecastReads`) when already
    read."""
    if budgets is not None:
        budget = budgets.get(team.pk)
    else:
        budget = (
            Budget.objects.filter(team=team, period_id=period.pk).first() if period.pk else None
        )
    return teams_forecast(
        team_ids=[team.pk], budget=budget, period=period, now=now, window_days=window_days,
        team=team.slug, charged=charged, reads=reads,
    )  # fmt: skip


def budget_forecast(budget: Budget, *, now: datetime, tree=None, charged=None) -> Forecast:
    """The month of a budget's owner: its team's (`forecast`), or for a unit's budget all the
    teams below the unit together, on the same rules: one run-rate over their summed daily
    charges, their bookings as each day's floor, spent as `budget_spend` counts it (from
    `charged`, `selectors.charged_by_team`, when already read)."""
    if budget.team_id is not None:
        return forecast(team=budget.team, period=budget.period, now=now)
    from apps.billing.selectors import budget_team_ids
    from apps.teams.selectors import org_tree, unit_path_label

    tree = tree or org_tree()
    return teams_forecast(
        team_ids=budget_team_ids(budget, tree=tree), budget=budget, period=budget.period,
        now=now, team="", unit=unit_path_label(budget.unit, tree=tree), charged=charged,
    )  # fmt: skip


def teams_forecast(
    *,
    team_ids,
    budget,
    period: BillingPeriod,
    now: datetime,
    window_days=None,
    team="",
    unit="",
    charged=None,
    reads: ForecastReads | None = None,
) -> Forecast:
    """The month of these teams together against `budget` (None: no budget), named `team`
    (a team's slug) or `unit` (a unit's label) in its message (see the module docstring);
    the ledger and bookings from `reads` when they were read for many owners at once."""
    window_days = reads.window_days if reads else window_days or settings.BILLING_FORECAST_DAYS
    start, end = month_bounds(period.month)
    from apps.billing.selectors import teams_spend

    spent = teams_spend(team_ids=team_ids, period=period, charged=charged)
    today = now.astimezone(UTC).date()
    if reads is not None:
        daily = reads.daily(team_ids)
    else:
        daily = daily_charges(
            team_ids=team_ids, start=today - timedelta(days=window_days), end=today
        )
    rate, low, high = run_rate(daily)
    since = max(now, start)
    if reads is not None:
        booked = reads.booked(team_ids)
    elif since < end:
        booked = booked_by_day(team_ids=team_ids, since=since, until=end, now=now)
    else:
        booked = {}
    result = Forecast(
        team=team,
        unit=unit,
        period=f"{period.month:%Y-%m}",
        budget=budget.amount if budget else None,
        enforcement=budget.enforcement if budget else None,
        spent=spent,
        booked=sum(booked.values(), ZERO).quantize(CENT),
        run_rate=rate,
        run_rate_low=low,
        run_rate_high=high,
        window_days=window_days,
        projected=spent,
        projected_low=spent,
        projected_high=spent,
    )
    running = [spent, spent, spent]
    cursor = since
    while cursor < end:
        day = cursor.astimezone(UTC).date()
        day_end = min(datetime.combine(day + DAY, datetime.min.time(), UTC), end)
        share = Decimal((day_end - cursor).total_seconds()) / Decimal(DAY.total_seconds())
        floor = booked.get(day, ZERO)
        for index, per_day in enumerate((rate, low, high)):
            running[index] += max(floor, per_day * share)
        result.days.append((day, *running))
        if budget is not None:
            if result.exceeds_on is None and running[0] > budget.amount:
                result.exceeds_on = day
            if result.exceeds_on_latest is None and running[1] > budget.amount:
                result.exceeds_on_latest = day
            if result.exceeds_on_earliest is None and running[2] > budget.amount:
                result.exceeds_on_earliest = day
        cursor = day_end
    result.projected, result.projected_low, result.projected_high = (
        value.quantize(CENT) for value in running
    )
    return result
