"""Writes of the efficiency app: the weekly digest's opt-out, and sending the digest."""

from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from apps.audit.services import audit_record
from apps.efficiency.advice import Filters, right_sizing, totals
from apps.efficiency.models import DigestSent, DigestSetting
from apps.outbox.services import outbox_send_mail
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, Team
from apps.teams.permissions import can_manage_team
from portal.exceptions import PolicyRefusal
from portal.formatting import format_money, format_when

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
        f"Right-sizing advice for team {team.slug}, {format_when(start, 'date')} to "
        f"{format_when(end - timedelta(seconds=1), 'date')} (UTC).",
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
        admins = list(
            Membership.objects.filter(
                team=team, role=TeamRole.TEAM_ADMIN, user__is_active=True
            ).values_list("user__email", flat=True)
        )
        if not any(admins) or DigestSent.objects.filter(team=team, week=start.date()).exists():
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
                outbox_send_mail(
                    subject=f"GPU right-sizing for {team.slug}: week of "
                    f"{format_when(start, 'date')}",
                    body=_digest_body(team, items, start=start, end=end),
                    recipients=admins,
                )
        except IntegrityError:  # another run sent it meanwhile
            result["skipped"] += 1
            continue
        result["sent"] += 1
    return result
