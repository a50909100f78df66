"""API tokens: named, several per user, read-only or read-write, with an expiry.

A key is shown once, when it is made; the database keeps only its SHA-256 digest (the keys are
256-bit random strings, so a fast digest is enough: nobody can try them all). Revoked tokens stay
listed (name, dates) so their owner can see what was turned off and when.
"""

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone
from rest_framework.authtoken.models import Token

from apps.audit.services import audit_record
from apps.teams.choices import ApiTokenScope
from apps.teams.models import ApiToken, User
from portal.exceptions import PolicyRefusal
from portal.raw_rows import columns_of, instance_from_row

KEY_PREFIX = "gpt_"
# The key's first characters kept in clear to tell tokens apart: the marker and 6 more.
SHOWN_PREFIX_LENGTH = len(KEY_PREFIX) + 6
EXPIRY_CHOICES_DAYS = (7, 30, 90, 365)
# A token's last-used time is written at most this often, so busy scripts do not turn every
# API read into a database write.
LAST_USED_PRECISION = timedelta(minutes=1)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _snapshot(token: ApiToken) -> dict:
    return {
        "name": token.name,
        "scope": token.scope,
        "prefix": token.prefix,
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
    }


@transaction.atomic
def api_token_create(
    *, user: User, name: str, scope: str, expires_in_days: int
) -> tuple[ApiToken, str]:
    """Make a token for `user`; returns it and its key (the only time the key is known)."""
    name = (name or "").strip()
    errors = {}
    if not name:
        errors["name"] = "Give the token a name, e.g. the script that will use it."
    elif len(name) > ApiToken._meta.get_field("name").max_length:
        errors["name"] = "Use at most 100 characters."
    if scope not in ApiTokenScope.values:
        errors["scope"] = "Choose read only or read and write."
    max_days = settings.API_TOKEN_MAX_DAYS
    if not isinstance(expires_in_days, int) or not 1 <= expires_in_days <= max_days:
        errors["expires_in_days"] = f"A token lasts between 1 and {max_days} days."
    if errors:
        raise ValidationError(errors)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            token = ApiToken.objects.create(
                user=user,
                name=name,
                scope=ApiTokenScope(scope),
                key_hash=hash_key(key),
                prefix=key[:SHOWN_PREFIX_LENGTH],
                expires_at=timezone.now() + timedelta(days=expires_in_days),
            )
    except IntegrityError as error:
        raise ValidationError({"name": f"You already have a token named “{name}”."}) from error
    audit_record(actor=user, action="api_token.create", target=token, after=_snapshot(token))
    return token, key


@transaction.atomic
def api_token_revoke(*, token: ApiToken, actor) -> ApiToken:
    """Turn a token off for good. Its owner and platform admins may; revoking twice is a no-op."""
    if actor.pk != token.user_id and not actor.is_platform_admin:
        raise PolicyRefusal("Only the token's owner may revoke it.", code="not_token_owner")
    token = ApiToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="api_token.revoke", target=token, before=_snapshot(token))
    return token


@transaction.atomic
def api_tokens_revoke_all(*, user: User, actor, reason: str) -> int:
    """Turn off every usable token of `user` (access withdrawn elsewhere, e.g. at the identity
    provider), each revocation audited; also the single unnamed token of earlier versions.
    Returns how many were turned off."""
    now = timezone.now()
    revoked = 0
    for token in ApiToken.objects.select_for_update().filter(user=user, revoked_at__isnull=True):
        token.revoked_at = now
        token.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor,
            action="api_token.revoke",
            target=token,
            before=_snapshot(token),
            reason=reason,
        )
        revoked += 1
    for legacy in Token.objects.filter(user=user):
        audit_record(
            actor=actor,
            action="api_token.revoke",
            target=legacy.user,
            before={"name": "unnamed token of earlier versions"},
            reason=reason,
        )
        legacy.delete()
        revoked += 1
    return revoked


# Every API request reads its token with the token's user: as raw SQL, since building the ORM's
# query (select_related) cost about three times the database's time to answer it.
_KEY_LOOKUP_SQL = """
    SELECT {token}, {user} FROM {tokens} t JOIN {users} u ON u.id = t.user_id
    WHERE t.key_hash = %s
"""


def api_token_for_key(key: str) -> ApiToken | None:
    """The token with this key, with its user, revoked or expired ones included (the caller
    says why it fails)."""
    quote = connection.ops.quote_name
    sql = _KEY_LOOKUP_SQL.format(
        token=columns_of(ApiToken, "t"),
        user=columns_of(User, "u"),
        tokens=quote(ApiToken._meta.db_table),
        users=quote(User._meta.db_table),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [hash_key(key)])
        row = cursor.fetchone()
    if row is None:
        return None
    width = len(ApiToken._meta.concrete_fields)
    token = instance_from_row(ApiToken, row[:width])
    token.user = instance_from_row(User, row[width:])
    return token


def api_token_mark_used(*, token: ApiToken) -> None:
    """Record that the token was just used (at most once per LAST_USED_PRECISION)."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_PRECISION:
        return
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now


def api_tokens_of(*, user: User) -> QuerySet[ApiToken]:
    """The user's tokens, usable ones first, newest first."""
    return ApiToken.objects.filter(user=user).order_by("revoked_at", "-created_at")
