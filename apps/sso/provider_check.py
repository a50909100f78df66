"""The periodic check with the identity provider: each SSO user's groups asked again with the
refresh token the provider issued at sign-in, applied as a sign-in would, and a user whom no
group grants anything any more de-provisioned (beat, SSO_CHECK_SECONDS)."""

import logging
from collections import Counter
from urllib.parse import quote_plus

import requests
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.audit.services import audit_record
from apps.sso import discovery, sealing
from apps.sso.models import SsoIdentity
from apps.sso.selectors import Grants, grants_for_groups
from apps.sso.services import (
    SsoLoginRefused,
    global_role_sync,
    groups_claim,
    memberships_sync,
    sso_identity_deprovision,
    unit_admins_sync,
)
from apps.teams.services import user_sessions_end

logger = logging.getLogger(__name__)


# Consecutive users the IdP failed to answer for before a check run gives up until the next.
_GIVE_UP_AFTER = 3


class _GrantLost(Exception):
    """The IdP refused the stored refresh token (invalid_grant)."""


def sso_identities_check() -> dict[str, int]:
    """The periodic check with the IdP (beat, SSO_CHECK_SECONDS): for every active user whose
    IdP issued a refresh token at sign-in, ask the IdP for their current groups and apply them
    as a sign-in would, de-provisioning a user whom no group grants anything any more. Users
    without a stored refresh token are checked at their next sign-in only. Returns how many
    identities ended in each outcome."""
    outcomes: Counter[str] = Counter()
    pending = (
        SsoIdentity.objects.filter(issuer=settings.OIDC_ISSUER, user__is_active=True)
        .exclude(refresh_token="")
        .order_by(F("last_checked_at").asc(nulls_first=True), "pk")
        .values_list("pk", flat=True)
    )
    failures_in_a_row = 0
    for identity_id in pending:
        outcome = sso_identity_check(identity_id=identity_id)
        outcomes[outcome] += 1
        failures_in_a_row = failures_in_a_row + 1 if outcome == "unreachable" else 0
        if failures_in_a_row >= _GIVE_UP_AFTER:
            # The IdP is down or misconfigured: waiting out a timeout per user helps nobody.
            logger.warning("sso check stopped: the identity provider did not answer")
            break
    return dict(outcomes)


def sso_identity_check(*, identity_id: int) -> str:
    """Check one user with the IdP by their stored refresh token; returns the outcome:
    `synced`, `deprovisioned`, `grant_lost` (the IdP refuses the token: revoked, expired, or
    the account disabled or removed there, which the IdP does not tell apart; the user is
    signed out and checked again at their next sign-in), `no_groups_claim` (the IdP's user
    info carries no groups: nothing is changed), or `unreachable` / `no_token` / `gone`."""
    identity = SsoIdentity.objects.filter(pk=identity_id).first()
    if identity is None:
        return "gone"
    refresh_token = sealing.unseal(identity.refresh_token)
    if not refresh_token:
        return "no_token"
    try:
        answer = _refresh(refresh_token)
        claims = _userinfo(answer["access_token"])
    except _GrantLost:
        _grant_lost(identity)
        return "grant_lost"
    except (requests.RequestException, ValueError, KeyError, discovery.DiscoveryError) as error:
        logger.warning("sso check of subject %s failed: %r", identity.subject, error)
        return "unreachable"
    if claims.get("sub") != identity.subject:
        logger.error("sso check: the IdP's user info for %s names another subject", identity.pk)
        return "unreachable"
    refresh_token = answer.get("refresh_token") or refresh_token
    if settings.OIDC_CLAIM_GROUPS not in claims:
        _checked(identity.pk, refresh_token=refresh_token, groups=None)
        return "no_groups_claim"
    try:
        groups = groups_claim(claims)
    except SsoLoginRefused:
        return "unreachable"
    grants = grants_for_groups(groups)
    groups_text = ", ".join(groups) or "none"
    if not grants.grants_anything:
        sso_identity_deprovision(
            issuer=identity.issuer,
            subject=identity.subject,
            groups=groups,
            reason="Periodic check with the identity provider: no group gives access any more; "
            f"groups: {groups_text}",
        )
        return "deprovisioned"
    _checked(
        identity.pk,
        refresh_token=refresh_token,
        groups=groups,
        grants=grants,
        reason=f"Periodic check with the identity provider; groups: {groups_text}",
    )
    return "synced"


def _refresh(refresh_token: str) -> dict:
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    client_id, secret = settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET
    methods = discovery.endpoint("token_endpoint_auth_methods_supported") or []
    auth = None
    # OpenID Connect Discovery 1.0: client_secret_basic when the IdP names no method.
    if not methods or "client_secret_basic" in methods:
        auth = (quote_plus(client_id), quote_plus(secret))  # RFC 6749, 2.3.1
    else:
        data.update(client_id=client_id, client_secret=secret)
    response = requests.post(
        discovery.endpoint("token_endpoint"), data=data, auth=auth, timeout=settings.OIDC_TIMEOUT
    )
    if response.status_code in (400, 401):
        try:
            error = response.json().get("error")
        except ValueError:
            error = None
        # RFC 6749, 5.2: invalid_grant is about this user's grant; anything else (a wrong
        # client secret, say) is the portal's configuration and must not sign users out.
        if error == "invalid_grant":
            raise _GrantLost()
    response.raise_for_status()
    return response.json()


def _userinfo(access_token: str) -> dict:
    endpoint = discovery.endpoint("userinfo_endpoint")
    if not endpoint:
        raise discovery.DiscoveryError("The identity provider has no userinfo endpoint.")
    response = requests.get(
        endpoint,
        headers={"Authorization": f"Bearer {access_token}"},
        timeout=settings.OIDC_TIMEOUT,
    )
    response.raise_for_status()
    claims = response.json()
    if not isinstance(claims, dict):
        raise ValueError("The identity provider's user info is not an object.")
    return claims


@transaction.atomic
def _checked(
    identity_id: int,
    *,
    refresh_token: str,
    groups: list[str] | None,
    grants: Grants | None = None,
    reason: str = "",
) -> None:
    identity = SsoIdentity.objects.select_for_update().select_related("user").get(pk=identity_id)
    identity.refresh_token = sealing.seal(refresh_token)
    identity.last_checked_at = timezone.now()
    if groups is not None:
        identity.last_groups = groups
    identity.save(update_fields=["refresh_token", "last_checked_at", "last_groups"])
    if grants is not None:
        global_role_sync(identity.user, grants, reason=reason)
        memberships_sync(identity.user, grants, reason=reason)
        unit_admins_sync(identity.user, grants, reason=reason)


@transaction.atomic
def _grant_lost(identity: SsoIdentity) -> None:
    identity = SsoIdentity.objects.select_for_update().select_related("user").get(pk=identity.pk)
    identity.refresh_token = ""
    identity.last_checked_at = timezone.now()
    identity.save(update_fields=["refresh_token", "last_checked_at"])
    sessions = user_sessions_end(user=identity.user)
    audit_record(
        actor=None,
        action="sso_identity.grant_lost",
        target=identity.user,
        after={"user": identity.user.username, "sessions_ended": sessions},
        reason="The identity provider no longer honours this user's sign-in (revoked, expired, "
        "or the account was disabled or removed there): signed out; teams, roles and API "
        "tokens are checked again at the next sign-in",
    )
