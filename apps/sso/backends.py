"""mozilla-django-oidc's backend, made strict and fed by discovery.

The library checks the ID token's signature and nonce; this backend also checks issuer,
audience (and azp), expiry and issue time, and turns every failure into an `SsoLoginRefused`
with a reason the error page can show. The user is found by issuer + subject only, never by
username or e-mail.
"""

import logging

import jwt
import requests
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from apps.sso import discovery
from apps.sso.services import SsoLoginRefused, sso_user_sync

logger = logging.getLogger(__name__)

_REQUIRED_CLAIMS = ["iss", "aud", "exp", "iat", "sub"]


def _refused(code: str, message: str) -> SsoLoginRefused:
    return SsoLoginRefused(message, code=code)


class PortalOIDCBackend(OIDCAuthenticationBackend):
    def __init__(self, *args, **kwargs):
        # The library reads every endpoint here; Django builds a backend for each request of a
        # signed-in user, so the endpoints are read from discovery only when a sign-in needs them.
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        from django.contrib.auth import get_user_model

        self.UserModel = get_user_model()

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self):  # noqa: N802 - the library's attribute name
        return discovery.endpoint("token_endpoint")

    @property
    def OIDC_OP_USER_ENDPOINT(self):  # noqa: N802
        return discovery.endpoint("userinfo_endpoint")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self):  # noqa: N802
        return discovery.endpoint("jwks_uri")

    def retrieve_matching_jwk(self, token):
        """The IdP's published key that signed the token: the one its `kid` names, or the only
        signing key when the IdP names none (the library insists on a kid)."""
        response = requests.get(self.OIDC_OP_JWKS_ENDPOINT, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        keys = [
            key
            for key in response.json().get("keys", [])
            if key.get("use", "sig") == "sig"
            and key.get("alg", self.OIDC_RP_SIGN_ALGO) == self.OIDC_RP_SIGN_ALGO
        ]
        kid = jwt.get_unverified_header(token).get("kid")
        if kid is not None:
            keys = [key for key in keys if key.get("kid") == kid]
        if len(keys) != 1:
            raise SuspiciousOperation("No single published key matches the ID token.")
        return jwt.PyJWK(keys[0], algorithm=self.OIDC_RP_SIGN_ALGO)

    def get_user(self, user_id):
        # The library's get_user skips Django's is_active check: a deactivated user's open
        # session would go on working.
        user = super().get_user(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None

    def authenticate(self, request, **kwargs):
        if not settings.SSO_ENABLED:
            return None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token, **kwargs):
        """Check the ID token fully: signature by the IdP's current key, issuer, audience,
        expiry, issue time and the nonce this browser's sign-in started with."""
        if not token:
            raise _refused("invalid_token", "The identity provider sent no ID token.")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as error:
            raise _refused("invalid_token", "The ID token is not a valid JWT.") from error
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise _refused(
                "bad_signature",
                f"The ID token is signed with {header.get('alg')!r}, not {self.OIDC_RP_SIGN_ALGO}.",
            )
        try:
            key = self.retrieve_matching_jwk(token)
        except SuspiciousOperation as error:
            raise _refused(
                "bad_signature",
                "The ID token is signed with a key the identity provider does not publish.",
            ) from error
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=settings.OIDC_ISSUER,
                leeway=settings.OIDC_CLOCK_SKEW_SECONDS,
                options={"require": _REQUIRED_CLAIMS},
            )
        except jwt.InvalidSignatureError as error:
            raise _refused("bad_signature", "The ID token's signature is not valid.") from error
        except jwt.ExpiredSignatureError as error:
            raise _refused("token_expired", "The ID token has expired.") from error
        except jwt.InvalidAudienceError as error:
            raise _refused(
                "wrong_audience", "The ID token was issued for another application."
            ) from error
        except jwt.InvalidIssuerError as error:
            raise _refused(
                "wrong_issuer", "The ID token was issued by an unknown identity provider."
            ) from error
        except jwt.MissingRequiredClaimError as error:
            raise _refused(
                "missing_claims", f"The ID token lacks the “{error.claim}” claim."
            ) from error
        except jwt.InvalidTokenError as error:
            raise _refused("invalid_token", f"The ID token is not valid ({error}).") from error
        audiences = payload["aud"] if isinstance(payload["aud"], list) else [payload["aud"]]
        if len(audiences) > 1 and payload.get("azp") != self.OIDC_RP_CLIENT_ID:
            raise _refused("wrong_audience", "The ID token was issued for another application.")
        if payload.get("nonce") != kwargs.get("nonce"):
            raise _refused(
                "nonce_mismatch",
                "The ID token does not belong to the sign-in this browser started (nonce).",
            )
        return payload

    def get_token(self, payload):
        token_info = super().get_token(payload)
        # Kept (sealed) for the periodic check with the IdP; see sso_identities_check.
        self.refresh_token = token_info.get("refresh_token") or ""
        return token_info

    def get_or_create_user(self, access_token, id_token, payload):
        userinfo = {}
        if self.OIDC_OP_USER_ENDPOINT and access_token:
            userinfo = self.get_userinfo(access_token, id_token, payload)
            if userinfo.get("sub") != payload["sub"]:
                # OpenID Connect Core 1.0, 5.3.2: a userinfo answer for another subject is void.
                raise _refused(
                    "invalid_token", "The identity provider's user info is for another user."
                )
        # The signed ID token wins where both carry a claim.
        claims = {**userinfo, **payload}
        return sso_user_sync(
            issuer=settings.OIDC_ISSUER,
            claims=claims,
            # Set by the callback view only for a sign-in that the signed-in user started to
            # link their IdP account (views.SsoLinkView), after confirming their password.
            link_to=getattr(self.request, "sso_link_user", None),
            refresh_token=getattr(self, "refresh_token", ""),
        )
