"""API authentication by the portal's named, hashed tokens (apps/teams/tokens.py).

Builds on portal.authentication.ThrottledTokenAuthentication, so every failed attempt (unknown,
expired or revoked key, deactivated user) counts towards the per-address guessing throttle.
During the transition from the single unnamed token of earlier versions, keys that still live in
rest_framework.authtoken's table are accepted as read-write unless API_LEGACY_TOKENS is off.
"""

from django.conf import settings
from django.utils import timezone
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied
from rest_framework.permissions import SAFE_METHODS

from portal.authentication import ThrottledTokenAuthentication


class ApiTokenAuthentication(ThrottledTokenAuthentication):
    def authenticate(self, request):
        # Imported here, as DRF's own TokenAuthentication does: DRF loads authentication classes
        # while rest_framework.views is imported, which may be before the app registry is ready.
        from apps.teams.models import ApiToken

        result = super().authenticate(request)
        if result is None:
            return None
        _user, token = result
        if (
            isinstance(token, ApiToken)
            and token.is_read_only
            and request.method not in SAFE_METHODS
        ):
            raise PermissionDenied(
                f"The API token “{token.name}” is read-only; create a read-and-write token "
                "to change anything.",
                code="token_read_only",
            )
        return result

    def authenticate_credentials(self, key):
        # Imported here: DRF imports this class while rest_framework.views loads, and the
        # services' error classes import rest_framework.views.
        from apps.teams import tokens

        token = tokens.api_token_for_key(key)
        if token is None:
            if settings.API_LEGACY_TOKENS:
                return super().authenticate_credentials(key)
            raise AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        if token.revoked_at is not None:
            raise AuthenticationFailed(f"The API token “{token.name}” was revoked.")
        if token.is_expired(timezone.now()):
            raise AuthenticationFailed(f"The API token “{token.name}” has expired.")
        tokens.api_token_mark_used(token=token)
        return token.user, token
