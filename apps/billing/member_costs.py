"""Cost by member inside a team: who booked or ran what in a month.

Built from the team's rounded detail lines (`exports.export_lines`), each given to the user
behind its source (a booking's creator, a job's submitter), so the members' costs and the
team's adjustments add up to the team's total on the chargeback page to the cent.
"""

from dataclasses import dataclass, field
from decimal import Decimal

from apps.billing.choices import ChargeSource
from apps.billing.exports import DETAIL, ExportScope, export_lines, gpu_hours
from apps.billing.models import BillingPeriod
from apps.jobs.models import Job
from apps.reservations.models import Reservation
from apps.teams.models import User

MEMBER_PARTS = ("busy_cost", "held_idle_cost", "over_quota_cost", "energy_cost")
ADJUSTMENTS_ROW = "(team adjustments)"
TOTAL_ROW = "(team total)"


@dataclass
class MemberCost:
    username: str
    user_id: int | None
    gpu_seconds: int = 0
    cost: Decimal = Decimal(0)
    parts: dict = field(default_factory=lambda: dict.fromkeys(MEMBER_PARTS, Decimal(0)))

    @property
    def gpu_hours(self) -> Decimal:
        return gpu_hours(self.gpu_seconds)

    def as_dict(self) -> dict:
        return {
            "member": self.username,
            "user_id": self.user_id,
            "gpu_hours": self.gpu_hours,
            **self.parts,
            "cost": self.cost,
        }


@dataclass
class TeamMemberCosts:
    period: BillingPeriod
    members: list[MemberCost]
    adjustments: Decimal = Decimal(0)

    @property
    def total(self) -> Decimal:
        return sum((m.cost for m in self.members), self.adjustments)

    @property
    def draft(self) -> bool:
        return not self.period.is_closed


def team_member_costs(period: BillingPeriod, team) -> TeamMemberCosts:
    """Each member's cost of the team's month (largest first), and the team's adjustments."""
    if period.pk is None:
        return TeamMemberCosts(period=period, members=[])
    lines = list(export_lines(ExportScope(period, team.pk, DETAIL)))
    owners = _owners(lines)
    by_user: dict[int | None, MemberCost] = {}
    adjustments = Decimal(0)
    for line in lines:
        if line["source"] == ChargeSource.ADJUSTMENT:
            adjustments += line["cost"]
            continue
        user_id = owners.get((line["source"], line["source_id"]))
        row = by_user.get(user_id)
        if row is None:
            row = by_user[user_id] = MemberCost(username="", user_id=user_id)
        row.gpu_seconds += line["sum_gpu_seconds"] or 0
        row.cost += line["cost"]
        for name in MEMBER_PARTS:
            row.parts[name] += line[name]
    users = User.objects.filter(pk__in=[pk for pk in by_user if pk])
    names = dict(users.values_list("pk", "username"))
    for user_id, row in by_user.items():
        row.username = names.get(user_id, "(unknown)")
    members = sorted(by_user.values(), key=lambda m: (-m.cost, m.username))
    return TeamMemberCosts(period=period, members=members, adjustments=adjustments)


def _owners(lines: list[dict]) -> dict[tuple, int]:
    """(source, id) -> the user who booked the reservation or submitted the job."""
    ids = {ChargeSource.RESERVATION: set(), ChargeSource.JOB: set()}
    for line in lines:
        if line["source"] in ids:
            ids[line["source"]].add(line["source_id"])
    owners = {}
    booked = Reservation.objects.filter(pk__in=ids[ChargeSource.RESERVATION])
    for pk, user_id in booked.values_list("pk", "created_by_id"):
        owners[(ChargeSource.RESERVATION, pk)] = user_id
    for pk, user_id in Job.objects.filter(pk__in=ids[ChargeSource.JOB]).values_list(
        "pk", "submitted_by_id"
    ):
        owners[(ChargeSource.JOB, pk)] = user_id
    return owners


def member_costs_hook(*, team, month_text: str | None = None, now=None, **_) -> dict:
    """Hook `teams.member_costs` (the team page): the team's cost by member in the month
    asked for (YYYY-MM; default this month; a bad month falls back to this month with an
    error), with its adjustments and total, as plain values."""
    from django.conf import settings
    from django.urls import reverse
    from django.utils import timezone

    from apps.billing.choices import is_showback
    from apps.billing.periods import add_months, month_start, parse_period
    from portal.exceptions import ApplicationError

    now = now or timezone.now()
    month, error = month_start(now), None
    if month_text:
        try:
            month = parse_period(month_text, now=now)
        except ApplicationError as refusal:
            error = refusal.message
    period = BillingPeriod.objects.filter(month=month).first() or BillingPeriod(month=month)
    costs = team_member_costs(period, team)
    text = f"{month:%Y-%m}"
    previous = f"{add_months(month, -1):%Y-%m}"
    return {
        "period": text,
        "draft": costs.draft,
        "currency": settings.BILLING_CURRENCY,
        "showback": is_showback(),
        "rows": [member.as_dict() for member in costs.members],
        "adjustments": costs.adjustments,
        "total": costs.total,
        "export_url": reverse("billing:member-costs-csv", args=[text, team.slug]),
        "previous_export_url": reverse("billing:member-costs-csv", args=[previous, team.slug]),
        "previous_period": previous,
        "next_period": f"{add_months(month, 1):%Y-%m}" if month < month_start(now) else None,
        "error": error,
    }


def member_cost_rows(period: BillingPeriod, team, *, showback: bool) -> tuple[list, list]:
    """(header, rows) of the cost-by-member CSV: one row per member, then the team's
    adjustments and its total (which is the team's total on the chargeback page)."""
    from django.conf import settings

    costs = team_member_costs(period, team)
    header = ["period", "team", "member", "gpu_hours"]
    header += [] if showback else [*MEMBER_PARTS, "cost", "currency"]
    header += ["draft"]
    common = {
        "period": f"{period.month:%Y-%m}",
        "team": team.slug,
        "currency": settings.BILLING_CURRENCY,
        "draft": "true" if costs.draft else "false",
    }
    rows = [{**common, **member.as_dict()} for member in costs.members]
    empty_parts = dict.fromkeys(MEMBER_PARTS, "")
    rows.append(
        {**common, **empty_parts, "member": ADJUSTMENTS_ROW, "gpu_hours": "",
         "cost": costs.adjustments}
    )  # fmt: skip
    hours = sum((m.gpu_hours for m in costs.members), Decimal(0))
    totals = {
        name: sum((m.parts[name] for m in costs.members), Decimal(0)) for name in MEMBER_PARTS
    }
    rows.append({**common, **totals, "member": TOTAL_ROW, "gpu_hours": hours, "cost": costs.total})
    return header, [{name: row[name] for name in header} for row in rows]
