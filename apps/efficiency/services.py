"""Writes of the efficiency app: the weekly digest (opt-out, sending) and the stored efficiency
summaries of ended jobs and bookings."""

from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Min, Q
from django.urls import reverse
from django.utils import timezone

from apps.audit.services import audit_record
from apps.efficiency.advice import Filters, right_sizing, totals
from apps.efficiency.models import AllocationKind, AllocationSummary, DigestSent, DigestSetting
from apps.efficiency.selectors import bookings_efficiency, jobs_efficiency
from apps.jobs.models import Job
from apps.reservations.choices import OPEN_STATUSES
from apps.reservations.models import Reservation, ReservationGpu
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, Team
from apps.teams.permissions import can_manage_team
from apps.teams.services import mail_in_their_zones
from portal.exceptions import PolicyRefusal
from portal.formatting import format_money, format_span

DIGEST_ITEMS = 10


@transaction.atomic
def digest_setting_set(*, team: Team, weekly_digest: bool, actor) -> DigestSetting:
    """A team admin (or platform admin) turns the team's weekly digest on or off; audited."""
    if not can_manage_team(actor, team):
        raise PolicyRefusal("Only the team's admins can change its digest.", code="not_team_admin")
    setting, _ = DigestSetting.objects.select_for_update().get_or_create(team=team)
    before = setting.weekly_digest
    setting.weekly_digest = weekly_digest
    setting.updated_by = actor
    setting.save()
    if before != weekly_digest:
        audit_record(
            actor=actor,
            action="efficiency.digest",
            target=team,
            before={"weekly_digest": before},
            after={"weekly_digest": weekly_digest},
        )
    return setting


def digest_enabled(team: Team) -> bool:
    setting = DigestSetting.objects.filter(team=team).first()
    return setting is None or setting.weekly_digest


def week_start(day: date) -> datetime:
    """Monday 00:00 UTC of the week of `day`."""
    return datetime.combine(day - timedelta(days=day.weekday()), time(), UTC)


def _digest_body(team: Team, items, *, start: datetime, end: datetime) -> str:
    total = sum((i.saving for i in items), Decimal(0))
    lines = [
        f"Right-sizing advice for team {team.slug}, {format_span(start, end)} "
        "(the portal's week, Monday to Monday UTC).",
        "",
        f"{len(items)} jobs and bookings held GPUs they did not use; at the rate cards that "
        f"is {format_money(total)} that could have been saved.",
        "",
    ]
    for row in totals(items, by="user"):
        lines.append(f"- {row['user']}: {row['items']} flagged, {format_money(row['saving'])}")
    lines += ["", "Largest first:"]
    for item in items[:DIGEST_ITEMS]:
        for finding in item.findings:
            saving = format_money(finding.saving) if finding.saving is not None else "n/a"
            lines.append(
                f"- {item.kind} #{item.pk} ({item.user}, {item.gpus} x {item.gpu_model}): "
                f"{finding.detail}; suggested: {finding.suggestion}; saving {saving}"
            )
    url = f"{settings.PORTAL_BASE_URL.rstrip('/')}{reverse('efficiency:advice')}"
    lines += [
        "",
        f"Details: {url}?team={team.slug}",
        "Team admins can turn this weekly email off on that page.",
    ]
    return "\n".join(lines) + "\n"


def weekly_digest_send(*, week_of: date | None = None) -> dict[str, int]:
    """Email each active team's admins the right-sizing advice of a week (Monday to Monday,
    UTC; default: last week), through the outbox; teams that opted out, have no admins or
    nothing to report get nothing. Once per team and week: a second run finds the week
    recorded and skips it."""
    now = timezone.now()
    start = week_start(week_of or (now - timedelta(days=7)).date())
    end = min(start + timedelta(days=7), now)
    result = {"sent": 0, "skipped": 0}
    opted_out = set(
        DigestSetting.objects.filter(weekly_digest=False).values_list("team_id", flat=True)
    )
    for team in Team.objects.filter(is_active=True).exclude(pk__in=opted_out):
        admins = [
            m.user
            for m in Membership.objects.filter(
                team=team, role=TeamRole.TEAM_ADMIN, user__is_active=True
            ).select_related("user")
        ]
        sent = DigestSent.objects.filter(team=team, week=start.date()).exists()
        if sent or not any(admin.email for admin in admins):
            result["skipped"] += 1
            continue
        items = right_sizing(user=None, filters=Filters(start=start, end=end, team=team.slug))
        if not items:
            result["skipped"] += 1
            continue
        try:
            with transaction.atomic():
                DigestSent.objects.create(
                    team=team,
                    week=start.date(),
                    items=len(items),
                    saving=sum(i.saving for i in items),
                )
                # Each admin reads the week's bounds in their own zone.
                mail_in_their_zones(
                    users=admins,
                    subject=f"GPU right-sizing for {team.slug}: week of {start:%b} {start.day}",
                    body=lambda team=team, items=items: _digest_body(
                        team, items, start=start, end=end
                    ),
                )
        except IntegrityError:  # another run sent it meanwhile
            result["skipped"] += 1
            continue
        result["sent"] += 1
    return result


SUMMARY_BATCH = 500
# Minute rollups of a minute are written by the minutely task; wait that long after an end.
SUMMARY_SETTLE = timedelta(minutes=5)


def _ended_jobs(*, since: datetime, until: datetime):
    return (
        Job.objects.annotate(
            last=Max("allocations__end"),
            running=Count("allocations", filter=Q(allocations__end__isnull=True)),
        )
        .filter(running=0, last__gte=since, last__lte=until)
        .values_list("pk", flat=True)
    )


def _ended_bookings(*, since: datetime, until: datetime):
    return (
        Reservation.objects.exclude(status__in=OPEN_STATUSES)
        .annotate(last=Max("holdings__end", filter=Q(holdings__active=True)))
        .filter(last__gte=since, last__lte=until)
        .values_list("pk", flat=True)
    )


def _summary_rows(kind: str, objects, efficiency, spans, now) -> list[AllocationSummary]:
    return [
        AllocationSummary(
            kind=kind,
            source_id=obj.pk,
            start=spans[obj.pk][0],
            end=spans[obj.pk][1],
            figures=efficiency[obj.pk].as_dict(),
            computed_at=now,
        )
        for obj in objects
        if obj.pk in efficiency and obj.pk in spans
    ]


def _store(rows: list[AllocationSummary]) -> int:
    AllocationSummary.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["kind", "source_id"],
        update_fields=["start", "end", "figures", "computed_at"],
    )
    return len(rows)


def allocation_summaries_update(
    *, since: datetime | None = None, now: datetime | None = None
) -> dict[str, int]:
    """Sum the efficiency of the jobs and bookings that gave back their last GPU between
    `since` (default: EFFICIENCY_SUMMARY_LOOKBACK_HOURS ago) and a few minutes ago, and store
    it (replacing an earlier sum: telemetry that arrived late is picked up while the end is
    within the lookback). Idempotent."""
    now = now or timezone.now()
    since = since or now - timedelta(hours=settings.EFFICIENCY_SUMMARY_LOOKBACK_HOURS)
    until = now - SUMMARY_SETTLE
    done = {"jobs": 0, "bookings": 0}
    job_ids = sorted(_ended_jobs(since=since, until=until))
    for offset in range(0, len(job_ids), SUMMARY_BATCH):
        jobs = list(
            Job.objects.filter(pk__in=job_ids[offset : offset + SUMMARY_BATCH]).prefetch_related(
                "allocations"
            )
        )
        spans = {
            j.pk: (
                min(a.start for a in j.allocations.all()),
                max(a.end for a in j.allocations.all()),
            )
            for j in jobs
            if j.allocations.all()
        }
        rows = _summary_rows(AllocationKind.JOB, jobs, jobs_efficiency(jobs, end=until), spans, now)
        done["jobs"] += _store(rows)
    booking_ids = sorted(_ended_bookings(since=since, until=until))
    for offset in range(0, len(booking_ids), SUMMARY_BATCH):
        batch = booking_ids[offset : offset + SUMMARY_BATCH]
        bookings = list(Reservation.objects.filter(pk__in=batch))
        spans = {
            row["reservation_id"]: (row["first"], row["last"])
            for row in ReservationGpu.objects.filter(reservation_id__in=batch, active=True)
            .values("reservation_id")
            .annotate(first=Min("start"), last=Max("end"))
            .order_by()
        }
        efficiency = bookings_efficiency(bookings, end=until)
        done["bookings"] += _store(
            _summary_rows(AllocationKind.BOOKING, bookings, efficiency, spans, now)
        )
    return done
