"""Sign-in through the identity provider: the portal user and their teams follow the ID token.

`sso_user_sync` runs in one transaction at every SSO sign-in; when it refuses (missing claims,
groups that map to nothing, a taken username, a deactivated account) nothing is written.
"""

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from rest_framework import status

from apps.audit.services import audit_record
from apps.sso.models import SsoIdentity
from apps.sso.selectors import Grants, grants_for_groups
from apps.teams.choices import GlobalRole, TeamRole
from apps.teams.models import Membership, Team, User
from portal.exceptions import ApplicationError

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


def _groups(claims: dict) -> list[str]:
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


@transaction.atomic
def sso_user_sync(*, issuer: str, claims: dict) -> User:
    """Create or update the user an ID token names, with roles and teams from its groups.

    The IdP account is recognised by issuer + subject; a first sign-in links to an existing
    local user of the same username unless that is a superuser (local admins stay local) or
    already linked to another IdP account. Every membership or role change is audited."""
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
    groups = _groups(claims)
    grants = grants_for_groups(groups)
    if not grants.grants_anything:
        raise SsoAccessRefused(
            "You signed in, but none of your groups at the identity provider gives access to "
            "the GPU portal. Ask a platform admin to map one of your groups to a team.",
            code="no_mapped_groups",
            detail={"groups": groups},
        )

    identity = (
        SsoIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    if identity is not None:
        user = identity.user
        if username != user.username and User.objects.filter(username=username).exists():
            raise SsoAccessRefused(
                f"Your username at the identity provider changed to “{username}”, which another "
                "portal user has. Ask a platform admin to sort the two accounts out.",
                code="username_taken",
            )
    else:
        user = User.objects.select_for_update().filter(username=username).first()
        if user is not None and (user.is_superuser or hasattr(user, "sso_identity")):
            raise SsoAccessRefused(
                f"The portal already has a user “{username}” that cannot be linked to your "
                "identity provider account. Ask a platform admin.",
                code="username_taken",
            )
        if user is None:
            user = User(username=username)
            user.set_unusable_password()
        identity = SsoIdentity(issuer=issuer, subject=subject)
    if user.pk is not None and not user.is_active:
        raise SsoAccessRefused(
            "Your portal account is deactivated. Ask a platform admin.", code="account_disabled"
        )

    user.username = username
    user.email = email
    user.first_name = _claim(claims, settings.OIDC_CLAIM_FIRST_NAME)[:150]
    user.last_name = _claim(claims, settings.OIDC_CLAIM_LAST_NAME)[:150]
    created = user.pk is None
    user.save()
    if created:
        audit_record(
            actor=None,
            action="user.create",
            target=user,
            after={"username": username, "email": email},
            reason=f"First sign-in through the identity provider {issuer}",
        )
    identity.user = user
    identity.last_login_at = timezone.now()
    identity.last_groups = groups
    identity.save()

    reason = f"Sign-in through the identity provider; groups: {', '.join(groups) or 'none'}"
    _sync_global_role(user, grants, reason=reason)
    _sync_memberships(user, grants, reason=reason)
    logger.info("sso sign-in of %s (subject %s), groups %s", username, subject, groups)
    return user


def _sync_global_role(user: User, grants: Grants, *, reason: str) -> None:
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


def _sync_memberships(user: User, grants: Grants, *, reason: str) -> None:
    """Memberships in IdP-managed teams follow the groups: added, role changed, removed."""
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
    for team_id, membership in existing.items():
        if team_id in grants.team_roles:
            continue
        audit_record(
            actor=None,
            action="membership.remove",
            target=teams[team_id],
            before={"user": user.username, "role": membership.role},
            reason=reason,
        )
        membership.delete()
