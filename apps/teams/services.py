"""Team membership changes. Team admins manage their own team; platform admins any team."""

from django.db import IntegrityError, transaction

from apps.audit.services import audit_record
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, Team, User
from apps.teams.permissions import can_manage_team
from portal.exceptions import ConflictError, PolicyRefusal


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
