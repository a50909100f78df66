"""Cost recovery: from showback of the platform's cost to full chargeback.

The platform cost center carries what no team pays for: unallocated GPU capacity (and any
charge or adjustment booked to the platform). Finance chooses per month how it is recovered
(`CostRecoveryPolicy`, set through `services.cost_recovery_set`):

- keep:      it stays on the platform (the default; teams see only their own use);
- usage:     shared in proportion to the GPU-hours charged to each team that month;
- guarantee: in proportion to each active team's guaranteed GPUs (all its quota rows);
- even:      in equal parts between the active teams.

The platform's cost is its chargeback total in cents (as on the page and every export). The
shares are cut from it by largest-remainder rounding: every share is rounded down to the cent,
and the cents left over go one each to the largest remainders (ties to the team created
first), so the shares add up to the platform's cost exactly, and teams' totals plus the shares
plus what the platform keeps reconcile to the fleet's total to the cent. With no weight to
share by (no usage, no guarantees, no active team), the platform keeps its cost.
"""

from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal

from django.db.models import Sum

from apps.billing.choices import RecoveryMethod
from apps.billing.models import BillingPeriod, CostRecoveryPolicy
from apps.teams.models import Quota, Team

ZERO = Decimal(0)
CENT = Decimal("0.01")


@dataclass
class Recovery:
    """A month's platform cost and who pays it: `shares` per team id (cents, summing to
    `recovered`), `kept` what stays on the platform."""

    method: str
    platform_cost: Decimal
    shares: dict[int, Decimal] = field(default_factory=dict)

    def get_method_display(self) -> str:
        return RecoveryMethod(self.method).label

    @property
    def recovered(self) -> Decimal:
        return sum(self.shares.values(), ZERO)

    @property
    def kept(self) -> Decimal:
        return self.platform_cost - self.recovered


def split_largest_remainder(amount: Decimal, weights: dict) -> dict:
    """`amount` (in cents) split in proportion to `weights` {key: weight >= 0}, each part in
    cents, the parts summing to `amount` exactly: floors first, then one cent each to the
    largest remainders (ties: the smaller key). Keys with no weight get nothing. A negative
    amount (a platform credit) is split as its opposite, negated."""
    total_weight = sum(weights.values())
    if not total_weight or not amount:
        return {}
    if amount < 0:
        return {key: -part for key, part in split_largest_remainder(-amount, weights).items()}
    cents = int((amount / CENT).to_integral_value())
    exact = {key: Decimal(cents) * Decimal(w) / Decimal(total_weight) for key, w in weights.items()}
    floors = {key: int(part.to_integral_value(rounding=ROUND_FLOOR)) for key, part in exact.items()}
    left = cents - sum(floors.values())
    by_remainder = sorted(exact, key=lambda key: (-(exact[key] - floors[key]), key))
    for key in by_remainder[:left]:
        floors[key] += 1
    return {key: Decimal(value) * CENT for key, value in floors.items() if weights[key]}


def policy_for(period: BillingPeriod) -> str:
    if period.pk is None:
        return RecoveryMethod.KEEP
    policy = CostRecoveryPolicy.objects.filter(period_id=period.pk).first()
    return policy.method if policy else RecoveryMethod.KEEP


def weights(method: str, period: BillingPeriod, totals: list[dict]) -> dict[int, Decimal]:
    """Each team's weight under `method` (team id -> weight), ordered by slug."""
    if method == RecoveryMethod.USAGE:
        return {
            row["team_id"]: Decimal(row.get("sum_gpu_seconds") or 0)
            for row in totals
            if row["team_id"] is not None
        }
    active = Team.objects.filter(is_active=True).order_by("slug")
    if method == RecoveryMethod.GUARANTEE:
        guaranteed = dict(
            Quota.objects.filter(team__is_active=True)
            .values("team_id")
            .annotate(total=Sum("guaranteed"))
            .values_list("team_id", "total")
        )
        return {team.pk: Decimal(guaranteed.get(team.pk, 0)) for team in active}
    if method == RecoveryMethod.EVEN:
        return {team.pk: Decimal(1) for team in active}
    return {}


def recovery(period: BillingPeriod, totals: list[dict] | None = None) -> Recovery:
    """The month's platform cost and its split under the month's policy (module docstring).
    `totals`: the month's `exports.team_totals` when the caller has them already."""
    from apps.billing.exports import team_totals

    if totals is None:
        totals = team_totals(period) if period.pk else []
    platform_cost = sum((row["cost"] for row in totals if row["team_id"] is None), ZERO)
    method = policy_for(period)
    result = Recovery(method=method, platform_cost=platform_cost)
    if method != RecoveryMethod.KEEP and platform_cost:
        result.shares = split_largest_remainder(platform_cost, weights(method, period, totals))
    return result


RECOVERY_LINE = "platform-share"


@dataclass(frozen=True)
class RecoveryEntry:
    """One export line of a recovery: a team's share (team set) or, in an export of all
    teams, the platform giving the recovered total back (team None, a negative amount)."""

    team: Team | None
    amount: Decimal
    ratio: Decimal
    description: str


def recovery_entries(period: BillingPeriod, team_id: int | None = None) -> list[RecoveryEntry]:
    """The lines every export adds for the month's recovery (none under `keep`): one per team
    share (only `team_id`'s when given), then the platform's negative line (all teams only),
    so an export still sums to the fleet's total."""
    if policy_for(period) == RecoveryMethod.KEEP:
        return []  # nothing to split: no need to add up the month
    split = recovery(period)
    if not split.shares:
        return []
    teams = Team.objects.in_bulk(list(split.shares))
    label = split.get_method_display()
    entries = [
        RecoveryEntry(
            teams[pk], share, share / split.platform_cost, f"Share of the platform's cost ({label})"
        )
        for pk, share in sorted(split.shares.items(), key=lambda item: teams[item[0]].slug)
        if team_id in (None, pk)
    ]
    if team_id is None:
        entries.append(
            RecoveryEntry(
                None, -split.recovered, -split.recovered / split.platform_cost,
                f"Platform cost recovered from the teams ({label})",
            )
        )  # fmt: skip
    return entries
