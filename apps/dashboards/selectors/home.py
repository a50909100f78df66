"""The figures of the role home pages."""

from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from django.db.models import Count
from django.utils import timezone

from apps.billing import selectors as billing
from apps.billing.periods import month_start
from apps.dashboards.selectors.filters import UNALLOCATED, parse_filters
from apps.dashboards.selectors.fleet import quota_pressure
from apps.dashboards.selectors.idle import gpu_state_counts
from apps.jobs.choices import WAITING_STATUSES, JobStatus
from apps.jobs.models import Job
from apps.reservations.choices import OPEN_STATUSES
from apps.reservations.models import Reservation
from apps.teams.models import OrgUnit, Quota, Team
from apps.teams.selectors import org_tree, unit_path_label


def home_summary(user, *, now: datetime | None = None) -> dict:
    """What the home page shows: per team of the user, quota, open bookings, jobs and spend this
    month; for platform admins, GPU states now and quota pressure of every team."""
    now = now or timezone.now()
    own = list(Team.objects.member_of(user).order_by("slug"))
    bookings = defaultdict(list)
    for r in (
        Reservation.objects.filter(team__in=own, status__in=OPEN_STATUSES, end__gt=now)
        .select_related("gpu_model")
        .order_by("start")
    ):
        bookings[r.team_id].append(r)
    jobs = defaultdict(lambda: defaultdict(int))
    for team_id, status, n in (
        Job.objects.filter(team__in=own, status__in=[*WAITING_STATUSES, JobStatus.RUNNING])
        .values_list("team_id", "status")
        .annotate(n=Count("id"))
        .order_by()
    ):
        jobs[team_id][JobStatus.RUNNING if status == JobStatus.RUNNING else JobStatus.QUEUED] += n
    period = billing.period_for_month(month_start(now))
    charged = billing.charged_by_team(period)
    spend = {t.pk: charged.get(t.pk, Decimal(0)) for t in own}
    quotas = defaultdict(list)
    for q in Quota.objects.filter(team__in=own).select_related("gpu_model"):
        quotas[q.team_id].append(q)
    teams = [
        {
            "team": t,
            "quotas": quotas[t.pk],
            "bookings": bookings[t.pk][:5],
            "booking_count": len(bookings[t.pk]),
            "jobs_queued": jobs[t.pk][JobStatus.QUEUED],
            "jobs_running": jobs[t.pk][JobStatus.RUNNING],
            "spend": spend.get(t.pk),
        }
        for t in own
    ]
    summary = {"teams": teams, "units": _admin_units(user, charged)}
    if user.is_platform_admin:
        filters = parse_filters({}, user, now=now)
        counts = gpu_state_counts(filters, now=now)
        summary["gpu_states"] = {
            s: counts.get(s, 0) for s in ("busy", "held_idle", UNALLOCATED, "unhealthy")
        }
        summary["quota_pressure"] = [
            row for row in quota_pressure(filters, now=now) if row["waiting"] or row["held"]
        ]
    return summary


def _admin_units(user, charged: dict) -> list[dict]:
    """The units the user administers, each with the teams below it and their spend this
    month together (the sum of the teams' charges, as the cost page by unit shows it)."""
    units = list(OrgUnit.objects.filter(memberships__user=user).order_by("name"))
    if not units:
        return []
    tree = org_tree()
    below = {unit.pk: tree.teams_under(unit.pk) for unit in units}
    teams = Team.objects.filter(pk__in=set().union(*below.values())).order_by("slug")
    return [
        {
            "unit": unit,
            "path": unit_path_label(unit, tree=tree),
            "teams": [team for team in teams if team.pk in below[unit.pk]],
            "spend": sum((charged.get(pk, Decimal(0)) for pk in below[unit.pk]), Decimal(0)),
        }
        for unit in units
    ]
