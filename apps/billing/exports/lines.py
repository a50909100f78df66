"""The lines of every chargeback export, and the one rounding rule they share.

Rounding rule: one owner. The ledger keeps each charge at full precision. The finest line of
the chargeback, the detail line (team x day x GPU model x source x GPU), is the only place money
is rounded: `export_lines` rounds each detail line's cost and its parts (busy, held idle, over
quota, energy; an adjustment is a line of its own) once, and every coarser figure (summary
lines, the page's team totals, statements, FOCUS rows) is a sum of those rounded parts, never a
sum of exact values rounded again. So a part reads the same in every format and the statement.

A line's cost is rounded half-even with a running total: walking the detail lines in the
export's fixed order (team, day, GPU model, source, ...), a line's cost is round(total up to and
including it) minus round(total before it). So every line is within a cent of its exact cost,
and any team's lines, the platform's lines and all lines together sum exactly to their rounded
exact totals. The parts come from the same running total: held idle and energy lie side by
side inside the line, each rounded as round(total before it + part) minus round(total before
it), so they never exceed the line and the busy part (what is left of a booking's or job's
line) is never negative; over quota overlaps them and is rounded on its own the same way. An
adjustment is a line of its own, labelled with the month it corrects. Exact totals come from
the database with `ExactSum`, so both databases (PostgreSQL, and SQLite, which keeps decimals
as floats) give the same cents.

One query per export (`query.line_rows`): the database groups, names and orders the lines and
gives each the exact cost before it, so a stream of one team's lines rounds as in the export of
all teams; the running total is then one pass in Python over that ordered stream. Statements
need only sums of the rounded lines: the database applies this same rule there and sums them
(`query.rounded_groups`; the tests hold the two equal to the cent).
"""

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from apps.billing.choices import PLATFORM_COST_CENTER, ChargeSource
from apps.billing.exports.query import line_rows, rounded_team_totals
from apps.billing.models import Adjustment, BillingPeriod

CENT = Decimal("0.01")
HOURS = Decimal(3600)
QUANTITY_PLACES = Decimal("0.000001")
DETAIL = "detail"
SUMMARY = "summary"


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


def gpu_hours(seconds) -> Decimal:
    return (Decimal(seconds or 0) / HOURS).quantize(QUANTITY_PLACES)


class RunningRounder:
    """Rounds a sequence of exact amounts to cents so that the rounded amounts always add up to
    the rounded running total (see the module docstring)."""

    def __init__(self, carried: Decimal = Decimal(0)) -> None:
        self.exact = carried
        self.rounded = cents(carried)

    def take(self, amount: Decimal, parts: dict | None = None) -> Decimal:
        """The rounded amount; each of `parts` (components of the amount) is replaced in place
        by its rounded value, taken from the same running total (never above the amount)."""
        for name, part in (parts or {}).items():
            parts[name] = cents(self.exact + (part or 0)) - self.rounded
        self.exact += amount
        previous, self.rounded = self.rounded, cents(self.exact)
        return self.rounded - previous

    def take_stacked(self, amount: Decimal, stacked: dict, overlapping: dict) -> Decimal:
        """As `take`, for parts of two kinds. `stacked` parts lie side by side inside the
        amount (held idle, then energy): each is rounded from the running total after the ones
        before it, so together they never exceed the amount and what is left of it (the busy
        part) is never negative. `overlapping` parts (over quota) are rounded each on its own."""
        cursor = self.exact
        for name, part in stacked.items():
            stacked[name] = cents(cursor + (part or 0)) - cents(cursor)
            cursor += part or 0
        return self.take(amount, overlapping)


@dataclass(frozen=True)
class ExportScope:
    period: BillingPeriod
    team_id: int | None = None  # None: every team and the platform
    level: str = SUMMARY

    @property
    def draft(self) -> bool:
        return not self.period.is_closed


def export_lines(scope: ExportScope) -> Iterator[dict]:
    """The export's lines in order, each with its exact and its rounded cost and parts. Detail
    lines are rounded here (the one rounding step); a summary line is the sum of its detail
    lines' rounded figures."""
    labels = adjustment_labels(scope.period)
    lines = _rounded(line_rows(scope.period, scope.team_id), labels)
    if scope.level == DETAIL:
        yield from lines
    else:
        yield from _merged(lines, _summary_key, SUMMARY_FIELDS)


def _rounded(rows: Iterator[dict], labels: dict[int, str]) -> Iterator[dict]:
    """The lines rounded with one running total; it starts from the exact cost of the lines
    before the first one (the teams ordered before a filtered team), so a team's lines round
    exactly as they do in the export of all teams."""
    rounder = None
    for row in rows:
        if rounder is None:
            rounder = RunningRounder(row["cost_before"])
        yield _round_line(rounder, row, labels)


def team_totals(period: BillingPeriod) -> list[dict]:
    """Per team (platform last): GPU-hours, busy/idle hours, and the cost and its parts, each
    the sum of the team's rounded detail lines (so every export sums to these). The database
    rounds the lines and sums them per team (`query.rounded_team_totals`): a month of ten
    thousand GPUs has millions of detail lines, which took minutes to round and add up here."""
    result = []
    for row in rounded_team_totals(period):
        row["sub_account"] = row["team__slug"] or PLATFORM_COST_CENTER
        row["gpu_hours"] = gpu_hours(row["sum_gpu_seconds"])
        row["busy_gpu_hours"] = gpu_hours(row["sum_busy_seconds"])
        row["held_idle_gpu_hours"] = gpu_hours(row["held_idle_seconds"])
        row["over_quota_gpu_hours"] = gpu_hours(row["over_quota_seconds"])
        result.append(row)
    return result


# The parts of a line's cost a reader sees; each rounded once, on the detail line.
COMPONENTS = ("held_idle_cost", "over_quota_cost", "energy_cost")
PARTS = ("busy_cost", *COMPONENTS, "adjustment_cost")
USAGE, ADJUSTMENT = "usage", "adjustment"
_SUMMED = (
    "sum_gpu_seconds", "sum_busy_seconds", "held_idle_seconds", "over_quota_seconds",
    "sum_energy_kwh", "exact_cost", "cost", *PARTS, *(f"exact_{name}" for name in COMPONENTS),
)  # fmt: skip
SUMMARY_FIELDS = (
    "team_id", "team__slug", "team__name", "team__cost_center", "day", "gpu_model__name",
    "sub_account", "line_type", "description",
)  # fmt: skip


def _summary_key(line: dict) -> tuple:
    """Detail lines of one summary line: team x day x GPU model; each adjustment stays a line
    of its own, so its label survives."""
    adjustment = line["source_id"] if line["line_type"] == ADJUSTMENT else None
    return (line["team_id"], line["day"], line["gpu_model__name"], adjustment)


def _merged(lines: Iterator[dict], key, fields) -> Iterator[dict]:
    """Consecutive lines with the same key added up (the `fields` of the first line kept)."""
    current, current_key = None, None
    for line in lines:
        line_key = key(line)
        if current is not None and line_key == current_key:
            for name in _SUMMED:
                current[name] += line[name] or 0
            continue
        if current is not None:
            yield current
        current, current_key = {name: line.get(name) for name in fields}, line_key
        current.update({name: line[name] or 0 for name in _SUMMED})
        if current.get("line_type") == USAGE:
            current["description"] = usage_description(current)
    if current is not None:
        yield current


def _round_line(rounder: RunningRounder, row: dict, labels: dict[int, str]) -> dict:
    """Round a detail line's cost and its parts with the running total (module docstring)."""
    stacked = {"held_idle_cost": row["held_idle_cost"], "energy_cost": row["sum_energy_cost"]}
    overlapping = {"over_quota_cost": row["over_quota_cost"]}
    row.update({f"exact_{name}": part or Decimal(0) for name, part in stacked.items()})
    row["exact_over_quota_cost"] = row["over_quota_cost"] or Decimal(0)
    row["cost"] = rounder.take_stacked(row["exact_cost"], stacked, overlapping)
    row.update(stacked)
    row.update(overlapping)
    source = row["source"]
    used = source in (ChargeSource.RESERVATION, ChargeSource.JOB)
    # Busy: GPU time used (a booking's busy share, a job), energy and held idle apart.
    busy = row["cost"] - row["held_idle_cost"] - row["energy_cost"]
    row["busy_cost"] = busy if used else Decimal(0)
    is_adjustment = source == ChargeSource.ADJUSTMENT
    row["adjustment_cost"] = row["cost"] if is_adjustment else Decimal(0)
    row["line_type"] = ADJUSTMENT if is_adjustment else USAGE
    row["sub_account"] = row["team__slug"] or PLATFORM_COST_CENTER
    row["description"] = (
        labels.get(row["source_id"], f"Adjustment #{row['source_id']}")
        if is_adjustment
        else charge_description(row)
    )
    return row


def adjustment_label(adjustment: Adjustment) -> str:
    """How every export and the statement name an adjustment: the month it corrects and why."""
    if adjustment.corrects_period_id:
        return f"Adjustment for {adjustment.corrects_period.month:%Y-%m}: {adjustment.reason}"
    return f"Adjustment: {adjustment.reason}"


def adjustment_labels(period: BillingPeriod) -> dict[int, str]:
    """{adjustment id: label} of the adjustments booked in the period."""
    if period.pk is None:
        return {}
    booked = Adjustment.objects.filter(period_id=period.pk).select_related("corrects_period")
    return {adjustment.pk: adjustment_label(adjustment) for adjustment in booked}


def charge_description(line: dict) -> str:
    """What a detail usage line charges for, in words."""
    source, model = line["source"], line["gpu_model__name"]
    if source == ChargeSource.RESERVATION:
        return f"{model} GPU reservation #{line['source_id']}"
    if source == ChargeSource.JOB:
        return f"{model} GPU job #{line['source_id']}"
    if source == ChargeSource.UNALLOCATED:
        return f"{model} unallocated capacity"
    return f"Adjustment #{line['source_id']}"


def usage_description(line: dict) -> str:
    """What a summary usage line charges for: the team's time on one GPU model that day."""
    return f"{line['gpu_model__name'] or 'GPU'} GPU time"


def flag(value: bool) -> str:
    return "true" if value else "false"
