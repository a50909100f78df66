"""Sign-in through the identity provider: the portal user and their teams follow the ID token.

`sso_user_sync` runs in one transaction at every SSO sign-in; when it refuses (missing claims,
groups that map to nothing, a taken username, a deactivated account) nothing is written.
"""

import logging

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from rest_framework import status

from apps.audit.services import audit_record
from apps.sso import sealing
from apps.sso.models import SsoIdentity
from apps.sso.selectors import Grants, grants_for_groups
from apps.teams.choices import GlobalRole, TeamRole
from apps.teams.models import Membership, OrgUnit, Team, UnitMembership, User
from apps.teams.services import user_sessions_end
from apps.teams.tokens import api_tokens_revoke_all
from portal.exceptions import ApplicationError, PolicyRefusal

logger = logging.getLogger(__name__)


class SsoLoginRefused(ApplicationError):
    """The sign-in cannot go on; `code` says why and `message` says it to the user."""

    status_code = status.HTTP_400_BAD_REQUEST


class SsoAccessRefused(SsoLoginRefused):
    """The IdP vouched for the user, but the portal does not let them in."""

    status_code = status.HTTP_403_FORBIDDEN


def _claim(claims: dict, name: str) -> str:
    value = claims.get(name)
    return value.strip() if isinstance(value, str) else ""


def groups_claim(claims: dict) -> list[str]:
    value = claims.get(settings.OIDC_CLAIM_GROUPS) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(group, str) for group in value):
        raise SsoLoginRefused(
            f"The identity provider sent a “{settings.OIDC_CLAIM_GROUPS}” claim that is not a "
            "list of group names.",
            code="bad_claims",
        )
    return sorted(set(value))


def _required_claims(claims: dict) -> tuple[str, str, str]:
    """subject, username and e-mail, refused with the names of those missing."""
    subject = _claim(claims, "sub")
    username = _claim(claims, settings.OIDC_CLAIM_USERNAME)
    email = _claim(claims, settings.OIDC_CLAIM_EMAIL)
    missing = [
        name
        for name, value in (
            ("sub", subject),
            (settings.OIDC_CLAIM_USERNAME, username),
            (settings.OIDC_CLAIM_EMAIL, email),
        )
        if not value
    ]
    if missing:
        raise SsoLoginRefused(
            "The identity provider did not send "
            + ", ".join(f"“{name}”" for name in missing)
            + ", which the portal needs to know who you are. Ask your identity provider's "
            "administrators to release it to this application.",
            code="missing_claims",
            detail={"missing": missing},
        )
    if len(username) > User._meta.get_field("username").max_length:
        raise SsoLoginRefused(
            "The username the identity provider sent is too long.", code="bad_claims"
        )
    return subject, username, email


def sso_user_sync(
    *, issuer: str, claims: dict, link_to: User | None = None, refresh_token: str = ""
) -> User:
    """Create or update the user an ID token names, with roles and teams from its groups.

    The IdP account is recognised by issuer + subject only, never by a claim its owner may
    choose (username, e-mail): a first sign-in always gets a new portal user, under a free
    username when the IdP's is taken. `link_to` is the explicit step that joins an existing
    local user instead: that user, signed in with their password, started this sign-in to
    link their IdP account (audited). A known user whose groups no longer grant anything is
    de-provisioned (committed) before the refusal. Every membership or role change is audited."""
    subject, username, email = _required_claims(claims)
    groups = groups_claim(claims)
    grants = grants_for_groups(groups)
    if not grants.grants_anything:
        if link_to is None:
            sso_identity_deprovision(
                issuer=issuer,
                subject=subject,
                groups=groups,
                reason="Sign-in through the identity provider: no group gives access any more; "
                f"groups: {', '.join(groups) or 'none'}",
            )
        raise SsoAccessRefused(
            "You signed in, but none of your groups at the identity provider gives access to "
            "the GPU portal. Ask a platform admin to map one of your groups to a team.",
            code="no_mapped_groups",
            detail={"groups": groups},
        )
    with transaction.atomic():
        identity = _locked_identity(issuer, subject)
        if link_to is not None:
            identity = _link(
                identity,
                user=link_to,
                issuer=issuer,
                subject=subject,
                actor=link_to,
                reason="Linked by the user, signed in with their password, through the "
                "identity provider's sign-in",
            )
        user = _user_for(identity, username=username, issuer=issuer)
        user.email = email
        user.first_name = _claim(claims, settings.OIDC_CLAIM_FIRST_NAME)[:150]
        user.last_name = _claim(claims, settings.OIDC_CLAIM_LAST_NAME)[:150]
        user.save()
        if identity is None:
            identity = SsoIdentity(issuer=issuer, subject=subject)
        identity.user = user
        identity.last_login_at = timezone.now()
        identity.last_groups = groups
        if refresh_token:
            identity.refresh_token = sealing.seal(refresh_token)
        identity.save()
        reason = f"Sign-in through the identity provider; groups: {', '.join(groups) or 'none'}"
        global_role_sync(user, grants, reason=reason)
        memberships_sync(user, grants, reason=reason)
        unit_admins_sync(user, grants, reason=reason)
    logger.info("sso sign-in of %s (subject %s), groups %s", user.username, subject, groups)
    return user


def _locked_identity(issuer: str, subject: str) -> SsoIdentity | None:
    return (
        SsoIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )


def _user_for(identity: SsoIdentity | None, *, username: str, issuer: str) -> User:
    """The identity's user (renamed after the IdP when that name is free), or a new user."""
    if identity is None:
        free = _free_username(username)
        user = User(username=free)
        user.set_unusable_password()
        user.save()
        audit_record(
            actor=None,
            action="user.create",
            target=user,
            after={"username": free, "idp_username": username},
            reason=f"First sign-in through the identity provider {issuer}"
            + ("" if free == username else f"; “{username}” belongs to another portal user"),
        )
        return user
    user = identity.user
    if not user.is_active:
        raise SsoAccessRefused(
            "Your portal account is deactivated. Ask a platform admin.", code="account_disabled"
        )
    if username != user.username and not User.objects.filter(username=username).exists():
        user.username = username
    return user


def _free_username(username: str) -> str:
    """`username`, or the first of username-sso, username-sso-2, ... no portal user has."""
    limit = User._meta.get_field("username").max_length
    for n in range(1000):
        suffix = "" if n == 0 else "-sso" if n == 1 else f"-sso-{n}"
        name = username[: limit - len(suffix)] + suffix
        if not User.objects.filter(username=name).exists():
            return name
    raise SsoAccessRefused(
        f"The portal cannot find a free username for “{username}”. Ask a platform admin.",
        code="username_taken",
    )


def _link(
    identity: SsoIdentity | None, *, user: User, issuer: str, subject: str, actor, reason: str
) -> SsoIdentity:
    """Attach the IdP account to `user` (audited). Only a platform admin may move one that is
    already attached to another user; that user is signed out everywhere."""
    if not user.is_active:
        raise SsoAccessRefused(
            f"The portal user “{user.username}” is deactivated.", code="account_disabled"
        )
    if identity is not None and identity.user_id == user.pk:
        return identity
    current = SsoIdentity.objects.filter(user=user).first()
    if current is not None:
        raise SsoAccessRefused(
            f"The portal user “{user.username}” is already linked to another identity provider "
            "account. Ask a platform admin.",
            code="already_linked",
        )
    before = None
    if identity is not None:
        if not getattr(actor, "is_platform_admin", False):
            raise SsoAccessRefused(
                "This identity provider account already belongs to the portal user "
                f"“{identity.user.username}”. Ask a platform admin to move it.",
                code="identity_taken",
            )
        before = {"user": identity.user.username}
        user_sessions_end(user=identity.user)
        identity.user = user
        identity.refresh_token = ""
        identity.save(update_fields=["user", "refresh_token"])
    else:
        identity = SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    audit_record(
        actor=actor,
        action="sso_identity.link",
        target=user,
        before=before,
        after={"user": user.username, "issuer": issuer, "subject": subject},
        reason=reason,
    )
    return identity


@transaction.atomic
def sso_identity_link(
    *, user: User, issuer: str, subject: str, actor, reason: str = ""
) -> SsoIdentity:
    """A platform admin links the IdP account (issuer + subject) to an existing portal user,
    or moves it there from the user a first sign-in created. Audited; the user's teams and
    roles follow their groups from their next sign-in."""
    if not getattr(actor, "is_platform_admin", False):
        raise PolicyRefusal(
            "Only platform admins link identity provider accounts to other users.",
            code="not_platform_admin",
        )
    issuer, subject = issuer.strip().rstrip("/"), subject.strip()
    if not issuer or not subject:
        raise ValidationError({"subject": "Give the identity provider and the subject."})
    return _link(
        _locked_identity(issuer, subject),
        user=user,
        issuer=issuer,
        subject=subject,
        actor=actor,
        reason=reason or "Linked by a platform admin",
    )


def sso_identity_deprovision(*, issuer: str, subject: str, groups: list[str], reason: str) -> bool:
    """End the access of the user the IdP account is linked to, which the IdP no longer grants
    anything: memberships in IdP-managed teams and the IdP-managed portal-wide role removed,
    every session ended, every API token revoked, the password (which would bypass the IdP)
    disabled unless the user is a superuser (a local admin), the stored refresh token dropped.
    Memberships of teams managed in the portal stay. Audited; a no-op for an unknown account
    and when nothing is left to end. Returns whether anything changed."""
    with transaction.atomic():
        identity = _locked_identity(issuer, subject)
        if identity is None:
            return False
        user = User.objects.select_for_update().get(pk=identity.user_id)
        nothing = grants_for_groups([])
        role_before = user.global_role
        removed = memberships_sync(user, nothing, reason=reason)
        units_left = unit_admins_sync(user, nothing, reason=reason)
        global_role_sync(user, nothing, reason=reason)
        tokens = api_tokens_revoke_all(user=user, actor=None, reason=reason)
        sessions = user_sessions_end(user=user)
        password = user.has_usable_password() and not user.is_superuser
        if password:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        identity.last_groups = groups
        identity.refresh_token = ""
        identity.save(update_fields=["last_groups", "refresh_token"])
        changed = bool(
            removed
            or units_left
            or tokens
            or sessions
            or password
            or role_before != user.global_role
        )
        if changed:
            audit_record(
                actor=None,
                action="sso_identity.deprovision",
                target=user,
                before={"user": user.username, "teams": removed, "global_role": role_before},
                after={
                    "user": user.username,
                    "global_role": user.global_role,
                    "api_tokens_revoked": tokens,
                    "sessions_ended": sessions,
                    "password_disabled": password,
                },
                reason=reason,
            )
    if changed:
        logger.warning("sso de-provisioned %s (subject %s): %s", user.username, subject, reason)
    return changed


def global_role_sync(user: User, grants: Grants, *, reason: str) -> None:
    """Set the portal-wide role the groups grant; take away one the IdP manages but no longer
    grants. A role no mapping mentions (set by hand) is left alone."""
    current = user.global_role or GlobalRole.NONE
    wanted = grants.global_role or GlobalRole.NONE
    if current == wanted:
        return
    if not wanted and current not in grants.managed_global_roles:
        return
    user.global_role = GlobalRole(wanted)
    user.save(update_fields=["global_role"])
    audit_record(
        actor=None,
        action="user.change_global_role",
        target=user,
        before={"user": user.username, "global_role": current},
        after={"user": user.username, "global_role": user.global_role},
        reason=reason,
    )


def memberships_sync(user: User, grants: Grants, *, reason: str) -> list[str]:
    """Memberships in IdP-managed teams follow the groups: added, role changed, removed.
    Returns the slugs of the teams the user left."""
    existing = {
        membership.team_id: membership
        for membership in Membership.objects.select_for_update()
        .select_related("team")
        .filter(user=user, team_id__in=grants.managed_team_ids)
    }
    teams = Team.objects.in_bulk(set(grants.team_roles) | set(existing))
    for team_id, role in sorted(grants.team_roles.items()):
        team = teams[team_id]
        membership = existing.get(team_id)
        if membership is None:
            membership = Membership.objects.create(user=user, team=team, role=TeamRole(role))
            audit_record(
                actor=None,
                action="membership.add",
                target=team,
                after={"user": user.username, "role": role},
                reason=f"{reason} (group {grants.team_groups[team_id]})",
            )
        elif membership.role != role:
            before = {"user": user.username, "role": membership.role}
            membership.role = TeamRole(role)
            membership.save(update_fields=["role"])
            audit_record(
                actor=None,
                action="membership.change_role",
                target=team,
                before=before,
                after={"user": user.username, "role": role},
                reason=f"{reason} (group {grants.team_groups[team_id]})",
            )
    return _drop_ungranted(
        existing,
        grants.team_roles,
        teams,
        user=user,
        action="membership.remove",
        reason=reason,
        roles=True,
    )


def unit_admins_sync(user: User, grants: Grants, *, reason: str) -> list[str]:
    """Unit admin roles in the units SSO_UNIT_ADMIN_GROUPS names follow the groups: added when
    a group grants one, removed when none does any more; units no group maps to are managed in
    the portal and left alone. Audited. Returns the slugs of the units the user left."""
    existing = {
        membership.unit_id: membership
        for membership in UnitMembership.objects.select_for_update()
        .select_related("unit")
        .filter(user=user, unit_id__in=grants.managed_unit_ids)
    }
    units = OrgUnit.objects.in_bulk(set(grants.unit_admin_of) | set(existing))
    for unit_id, group in sorted(grants.unit_admin_of.items()):
        if unit_id in existing:
            continue
        UnitMembership.objects.create(user=user, unit=units[unit_id])
        audit_record(
            actor=None,
            action="unit.admin_add",
            target=units[unit_id],
            after={"user": user.username},
            reason=f"{reason} (group {group})",
        )
    return _drop_ungranted(
        existing, grants.unit_admin_of, units, user=user, action="unit.admin_remove", reason=reason
    )


def _drop_ungranted(
    existing: dict, granted, targets: dict, *, user: User, action: str, reason: str, roles=False
) -> list[str]:
    """Delete the user's memberships (team or unit, by its id in `existing`) that no group
    grants any more, each audited (with the role it had where `roles`); returns the slugs
    left, sorted."""
    left = []
    for target_id, membership in existing.items():
        if target_id in granted:
            continue
        left.append(targets[target_id].slug)
        before = {"user": user.username}
        if roles:
            before["role"] = membership.role
        audit_record(
            actor=None, action=action, target=targets[target_id], before=before, reason=reason
        )
        membership.delete()
    return sorted(left)
