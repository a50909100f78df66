"""The identity provider's discovery document (/.well-known/openid-configuration), cached.

It names the authorization, token, userinfo, JWKS and logout endpoints, so the only setting an
operator needs is OIDC_ISSUER. It is cached per process for DISCOVERY_TTL_SECONDS; the JWKS
itself is read at every sign-in, so a rotated IdP key is picked up at once.
"""

import time

import requests
from django.conf import settings

DISCOVERY_TTL_SECONDS = 3600
REQUIRED_ENDPOINTS = ("authorization_endpoint", "token_endpoint", "jwks_uri")

_cache: dict[str, tuple[float, dict]] = {}


class DiscoveryError(Exception):
    """The IdP's discovery document could not be read or does not fit the configuration."""


def provider_metadata() -> dict:
    issuer = settings.OIDC_ISSUER
    cached = _cache.get(issuer)
    if cached and cached[0] > time.monotonic():
        return cached[1]
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        metadata = response.json()
    except (requests.RequestException, ValueError) as error:
        raise DiscoveryError(
            f"The identity provider at {issuer} did not answer ({error.__class__.__name__})."
        ) from error
    if not isinstance(metadata, dict) or str(metadata.get("issuer", "")).rstrip("/") != issuer:
        # OpenID Connect Discovery 1.0, section 4.3: the document must name the same issuer.
        raise DiscoveryError(
            f"The discovery document at {url} names another issuer than OIDC_ISSUER ({issuer})."
        )
    missing = [name for name in REQUIRED_ENDPOINTS if not metadata.get(name)]
    if missing:
        raise DiscoveryError(f"The discovery document at {url} lacks {', '.join(missing)}.")
    _cache[issuer] = (time.monotonic() + DISCOVERY_TTL_SECONDS, metadata)
    return metadata


def endpoint(name: str) -> str | None:
    return provider_metadata().get(name)


def clear_cache() -> None:
    _cache.clear()
