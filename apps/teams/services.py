"""Team membership changes. Team admins manage their own team; platform admins any team."""

from collections import defaultdict
from collections.abc import Callable

from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.outbox.services import outbox_send_mail
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, OrgUnit, Quota, Team, UnitMembership, UnitQuota, User
from apps.teams.permissions import (
    can_manage_team,
    can_manage_unit,
    can_set_team_quota,
    can_set_unit_quota,
)
from apps.teams.selectors import org_tree
from portal import hooks
from portal.exceptions import ConflictError, PolicyRefusal
from portal.timezones import in_zone, zone_or_none


def _require_manager(actor, team: Team) -> None:
    if not can_manage_team(actor, team):
        raise PolicyRefusal(
            "Only the team's admins and platform admins may change its members.",
            code="not_team_admin",
        )


@transaction.atomic
def membership_add(*, team: Team, user: User, role: str = TeamRole.MEMBER, actor) -> Membership:
    """Add a user to a team with a role; refused if already a member."""
    _require_manager(actor, team)
    try:
        with transaction.atomic():
            membership = Membership.objects.create(team=team, user=user, role=TeamRole(role))
    except IntegrityError as error:
        raise ConflictError(f"{user.username} is already a member of {team.slug}.") from error
    audit_record(
        actor=actor,
        action="membership.add",
        target=team,
        after={"user": user.username, "role": membership.role},
    )
    return membership


@transaction.atomic
def membership_change_role(*, membership: Membership, role: str, actor) -> Membership:
    _require_manager(actor, membership.team)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    before = {"user": membership.user.username, "role": membership.role}
    _refuse_removing_last_admin(membership, new_role=TeamRole(role))
    membership.role = TeamRole(role)
    membership.save(update_fields=["role"])
    audit_record(
        actor=actor,
        action="membership.change_role",
        target=membership.team,
        before=before,
        after={"user": membership.user.username, "role": membership.role},
    )
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, actor) -> None:
    _require_manager(actor, membership.team)
    membership = (
        Membership.objects.select_for_update().select_related("team", "user").get(pk=membership.pk)
    )
    _refuse_removing_last_admin(membership, new_role=None)
    audit_record(
        actor=actor,
        action="membership.remove",
        target=membership.team,
        before={"user": membership.user.username, "role": membership.role},
    )
    membership.delete()


def user_sessions_end(*, user: User) -> int:
    """Sign `user` out of every browser: delete their stored sessions (the portal keeps
    sessions in the database). Returns how many were ended."""
    ended = [
        session.pk
        for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator()
        if session.get_decoded().get(SESSION_KEY) == str(user.pk)
    ]
    Session.objects.filter(pk__in=ended).delete()
    return len(ended)


def _refuse_removing_last_admin(membership: Membership, *, new_role: str | None) -> None:
    """A team keeps at least one team admin, else nobody but platform admins could manage it."""
    if membership.role != TeamRole.TEAM_ADMIN or new_role == TeamRole.TEAM_ADMIN:
        return
    other_admins = (
        Membership.objects.select_for_update()
        .filter(team=membership.team, role=TeamRole.TEAM_ADMIN)
        .exclude(pk=membership.pk)
    )
    if not other_admins.exists():
        raise ConflictError(
            f"{membership.user.username} is the last team admin of {membership.team.slug}; "
            "make someone else team admin first.",
            code="last_team_admin",
        )


def _quota_snapshot(quota: Quota | UnitQuota) -> dict:
    return {
        "gpu_model": quota.gpu_model.name if quota.gpu_model else None,
        "guaranteed": quota.guaranteed,
        "limit": quota.limit,
    }


def quota_numbers_check(*, guaranteed: int, limit: int) -> None:
    """The one rule for a quota's numbers (forms, the API, the what-if page and quota_set all
    call it; the database's check constraint is the last word): both at least 0, and the limit
    at least the guarantee. Raises ValidationError naming the field."""
    errors = {}
    if guaranteed < 0:
        errors["guaranteed"] = "Guaranteed GPUs cannot be negative."
    if limit < 0:
        errors["limit"] = "The limit cannot be negative."
    elif limit < guaranteed:
        errors["limit"] = f"The limit ({limit}) must be at least guaranteed ({guaranteed})."
    if errors:
        raise ValidationError(errors)


def _require_quota_admin(actor, team: Team) -> None:
    if not can_set_team_quota(actor, team):
        raise PolicyRefusal(
            "Only platform admins and the admins of the team's unit may change its quotas.",
            code="not_admin",
        )


@transaction.atomic
def quota_set(*, team: Team, gpu_model, guaranteed: int, limit: int, actor) -> Quota:
    """Create or change a team's quota for a GPU model (None: all models). Audited.

    Lowering a quota does not cancel existing bookings; it limits new ones."""
    _require_quota_admin(actor, team)
    quota_numbers_check(guaranteed=guaranteed, limit=limit)
    quota = (
        Quota.objects.select_for_update(of=("self",)).filter(team=team, gpu_model=gpu_model).first()
        if gpu_model is not None
        # of=("self",): the ordering joins the nullable gpu_model, which PostgreSQL cannot lock
        else Quota.objects.select_for_update(of=("self",))
        .filter(team=team, gpu_model__isnull=True)
        .first()
    )
    before = _quota_snapshot(quota) if quota else None
    if quota is None:
        quota = Quota(team=team, gpu_model=gpu_model)
    quota.guaranteed, quota.limit = guaranteed, limit
    quota.full_clean()
    home = OrgUnit.objects.get(teams=team)  # as stored: `team` may predate a move
    unit_envelope_check(unit=home, gpu_model=gpu_model, extra={team: guaranteed})
    quota.save()
    audit_record(
        actor=actor,
        action="quota.change" if before else "quota.create",
        target=quota,
        before=before,
        after=_quota_snapshot(quota),
    )
    # Integrations (Slurm limits) follow the quota; a refusal rolls the edit back.
    hooks.emit("quota.changed", quota=quota, actor=actor)
    return quota


@transaction.atomic
def quota_delete(*, quota: Quota, actor) -> None:
    _require_quota_admin(actor, quota.team)
    quota = (
        Quota.objects.select_for_update(of=("self",))
        .select_related("gpu_model", "team")
        .get(pk=quota.pk)
    )
    audit_record(actor=actor, action="quota.delete", target=quota, before=_quota_snapshot(quota))
    quota.delete()
    hooks.emit("quota.changed", quota=quota, actor=actor)


# Team pages live at /teams/<slug>/: these slugs would hide the portal's own pages there.
RESERVED_TEAM_SLUGS = frozenset({"new", "token", "platform-admins", "units", "me"})


@transaction.atomic
def team_create(
    *, slug: str, name: str, cost_center: str = "", quotas=(), unit: OrgUnit | None = None, actor
) -> Team:
    """A platform admin creates a team, with optional quota rows ``(gpu_model or None,
    guaranteed, limit)``. Audited (the team, then each quota through ``quota_set``); one
    transaction, so a refused quota leaves no team behind. A taken slug is a conflict."""
    team = Team(slug=slug.strip(), name=name.strip(), cost_center=cost_center.strip())
    if unit is not None:
        team.unit = unit
    if not can_manage_unit(actor, team.unit):
        raise PolicyRefusal(
            "Only platform admins and the unit's admins may create teams in it.", code="not_admin"
        )
    team.full_clean(validate_unique=False)
    if team.slug in RESERVED_TEAM_SLUGS:
        raise ValidationError({"slug": f"“{team.slug}” names a portal page; choose another slug."})
    if Team.objects.filter(slug=team.slug).exists():
        raise ConflictError(f"A team with the slug “{team.slug}” already exists.")
    try:
        with transaction.atomic():
            team.save()
    except IntegrityError as error:  # created by someone else since the check above
        raise ConflictError(f"A team with the slug “{team.slug}” already exists.") from error
    audit_record(
        actor=actor,
        action="team.create",
        target=team,
        after={
            "slug": team.slug,
            "name": team.name,
            "cost_center": team.cost_center,
            "unit": team.unit.slug,
        },
    )
    for gpu_model, guaranteed, limit in quotas:
        quota_set(team=team, gpu_model=gpu_model, guaranteed=guaranteed, limit=limit, actor=actor)
    return team


def user_time_zone_set(*, user: User, name: str) -> User:
    """Show this user's pages and e-mails in the zone `name` (an IANA name such as
    "America/New_York"); ValidationError for a name the portal does not know."""
    if zone_or_none(name) is None:
        raise ValidationError(
            f"“{name[:64]}” is not a time zone the portal knows; choose one from the list, "
            "such as America/New_York or Europe/Berlin.",
            code="unknown_time_zone",
        )
    if user.time_zone != name:
        user.time_zone = name
        user.save(update_fields=["time_zone"])
    return user


def user_time_zone_learn(*, user: User, name: str) -> bool:
    """Remember the zone the user's browser reports when they have none yet, so that e-mails
    sent to them use it too. A chosen zone is kept. True when the zone was stored."""
    if user.time_zone or zone_or_none(name) is None:
        return False
    updated = User.objects.filter(pk=user.pk, time_zone="").update(time_zone=name)
    if updated:
        user.time_zone = name
    return bool(updated)


def mail_in_their_zones(
    *, users, subject: str | Callable[[], str], body: str | Callable[[], str]
) -> int:
    """Email `users` (inactive ones and those without an address are left out), each in their
    own time zone: `subject` and `body`, when callables, are written once per zone with that
    zone active, so every time in them (`format_when`, a reservation's name) reads as the
    recipient reads the portal. One outbox message per zone; returns how many were queued."""
    by_zone: dict[str, set[str]] = defaultdict(set)
    for user in users:
        if user.is_active and user.email:
            by_zone[user.time_zone].add(user.email)
    for zone_name, emails in sorted(by_zone.items()):
        with in_zone(zone_name):
            text = body() if callable(body) else body
            title = subject() if callable(subject) else subject
        outbox_send_mail(subject=title, body=text, recipients=sorted(emails))
    return len(by_zone)


# --- Organisation units -------------------------------------------------------------------


def _unit_snapshot(unit: OrgUnit) -> dict:
    return {
        "slug": unit.slug,
        "name": unit.name,
        "parent": unit.parent.slug if unit.parent_id else None,
        "cost_center": unit.cost_center,
    }


def _require_unit_admin(actor, *units: OrgUnit) -> None:
    if not all(can_manage_unit(actor, unit) for unit in units):
        raise PolicyRefusal(
            "Only platform admins and the admins of the units concerned may do this.",
            code="not_admin",
        )


def unit_envelope_check(*, unit: OrgUnit, gpu_model, extra: dict | None = None) -> None:
    """The nesting rule of guarantees: what sits directly below `unit` (its teams and child
    units) may not be guaranteed more GPUs of `gpu_model` (None: the any-model rows) than the
    unit guarantees, where the unit has a row for it (no row: no envelope). `extra` replaces
    the guarantee of one child, ``{team_or_unit: guaranteed}``, to check a change before it is
    saved. Raises ValidationError naming the numbers."""
    envelope = UnitQuota.objects.filter(unit=unit, gpu_model=gpu_model).first()
    if envelope is None:
        return
    extra = extra or {}
    team_rows = Quota.objects.filter(team__unit=unit, gpu_model=gpu_model)
    unit_rows = UnitQuota.objects.filter(unit__parent=unit, gpu_model=gpu_model)
    guaranteed = {("team", r.team_id): r.guaranteed for r in team_rows}
    guaranteed |= {("unit", r.unit_id): r.guaranteed for r in unit_rows}
    for child, value in extra.items():
        guaranteed[("team" if isinstance(child, Team) else "unit", child.pk)] = value
    total = sum(guaranteed.values())
    if total > envelope.guaranteed:
        scope = gpu_model.name if gpu_model is not None else "all GPU models"
        raise ValidationError(
            {
                "guaranteed": f"The teams and units in {unit.name} would be guaranteed {total} "
                f"GPUs of {scope}, more than the {envelope.guaranteed} the unit guarantees. "
                "Lower another guarantee in the unit first, or raise the unit's."
            }
        )


@transaction.atomic
def unit_create(*, slug: str, name: str, parent: OrgUnit, cost_center: str = "", actor) -> OrgUnit:
    """A platform admin adds a unit below `parent` (a second root is refused: the tree has
    one). Audited. A taken slug is a conflict."""
    if parent is None:
        raise ValidationError({"parent": "Choose the unit the new one sits in."})
    _require_unit_admin(actor, parent)
    unit = OrgUnit(slug=slug.strip(), name=name.strip(), parent=parent, cost_center=cost_center)
    unit.full_clean(validate_unique=False)
    if OrgUnit.objects.filter(slug=unit.slug).exists():
        raise ConflictError(f"A unit with the slug “{unit.slug}” already exists.")
    unit.save()
    audit_record(actor=actor, action="unit.create", target=unit, after=_unit_snapshot(unit))
    hooks.emit("unit.changed", unit=unit, actor=actor)
    return unit


@transaction.atomic
def unit_move(*, unit: OrgUnit, parent: OrgUnit, actor) -> OrgUnit:
    """Move a unit (with everything below it) under another. Refused when the new parent is
    the unit itself or below it, when the unit is the root, or when the move would give the
    new parent more guarantees below it than it guarantees. Audited."""
    unit = OrgUnit.objects.select_for_update().get(pk=unit.pk)
    if unit.parent_id is None:
        raise ValidationError({"parent": "The organisation's root unit cannot be moved."})
    _require_unit_admin(actor, unit.parent, parent)
    if parent is None or org_tree().would_cycle(unit.pk, parent.pk):
        raise ValidationError({"parent": f"{unit.name} cannot move below itself."})
    before = _unit_snapshot(unit)
    for row in UnitQuota.objects.filter(unit=unit):
        unit_envelope_check(unit=parent, gpu_model=row.gpu_model, extra={unit: row.guaranteed})
    unit.parent = parent
    unit.save(update_fields=["parent"])
    audit_record(
        actor=actor, action="unit.move", target=unit, before=before, after=_unit_snapshot(unit)
    )
    hooks.emit("unit.changed", unit=unit, actor=actor)
    return unit


@transaction.atomic
def team_move(*, team: Team, unit: OrgUnit, actor) -> Team:
    """Move a team into another unit, refused when its guarantees do not fit the new unit's
    envelope. Audited."""
    team = Team.objects.select_for_update().get(pk=team.pk)
    _require_unit_admin(actor, team.unit, unit)
    before = {"unit": team.unit.slug}
    for row in Quota.objects.filter(team=team):
        unit_envelope_check(unit=unit, gpu_model=row.gpu_model, extra={team: row.guaranteed})
    team.unit = unit
    team.save(update_fields=["unit"])
    audit_record(
        actor=actor, action="team.move", target=team, before=before, after={"unit": unit.slug}
    )
    hooks.emit("team.moved", team=team, actor=actor)
    return team


@transaction.atomic
def unit_quota_set(*, unit: OrgUnit, gpu_model, guaranteed: int, limit: int, actor) -> UnitQuota:
    """Create or change a unit's guarantee and limit for a GPU model (None: all models).
    Refused when it would guarantee less than what sits directly below it is guaranteed, or
    more than its parent's envelope leaves. Audited."""
    if not can_set_unit_quota(actor, unit):
        raise PolicyRefusal(
            "Only platform admins and the admins of a unit above it may change a unit's quotas.",
            code="not_admin",
        )
    quota_numbers_check(guaranteed=guaranteed, limit=limit)
    OrgUnit.objects.select_for_update().filter(pk=unit.pk).first()  # one envelope change at once
    row = UnitQuota.objects.filter(unit=unit, gpu_model=gpu_model).first()
    before = _quota_snapshot(row) if row else None
    if row is None:
        row = UnitQuota(unit=unit, gpu_model=gpu_model)
    row.guaranteed, row.limit = guaranteed, limit
    row.full_clean()
    if unit.parent_id is not None:
        unit_envelope_check(unit=unit.parent, gpu_model=gpu_model, extra={unit: guaranteed})
    row.save()
    unit_envelope_check(unit=unit, gpu_model=gpu_model)
    audit_record(
        actor=actor,
        action="unit_quota.change" if before else "unit_quota.create",
        target=row,
        before=before,
        after=_quota_snapshot(row),
    )
    hooks.emit("unit.changed", unit=unit, actor=actor)
    return row


@transaction.atomic
def unit_admin_add(*, unit: OrgUnit, user: User, actor) -> UnitMembership:
    """Make `user` an admin of `unit` (platform admins, or an admin of the unit or above).
    Audited."""
    _require_unit_admin(actor, unit)
    membership, created = UnitMembership.objects.get_or_create(unit=unit, user=user)
    if not created:
        raise ConflictError(f"{user} is already an admin of {unit.name}.")
    audit_record(actor=actor, action="unit.admin_add", target=unit, after={"user": user.username})
    return membership


@transaction.atomic
def unit_admin_remove(*, unit: OrgUnit, user: User, actor) -> None:
    _require_unit_admin(actor, unit)
    deleted, _ = UnitMembership.objects.filter(unit=unit, user=user).delete()
    if not deleted:
        raise ValidationError({"user": f"{user} is not an admin of {unit.name}."})
    audit_record(
        actor=actor, action="unit.admin_remove", target=unit, before={"user": user.username}
    )
