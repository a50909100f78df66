"""Token authentication that throttles guessing: failed token attempts are counted per client
address in the shared cache; past API_TOKEN_FAILURE_THROTTLE every token from that address is
refused with 429 until the window ends, so valid tokens cannot be found by trying.

If the cache is down, reads go on without the guessing throttle (a logged warning) and writes
are refused with 503 and Retry-After: an outage of the cache never becomes a 500."""

import logging

from django.conf import settings
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import BaseThrottle

from portal.rate_limits import CacheUnavailable, Rate, exceeded, hit

logger = logging.getLogger(__name__)


def cache_down(request, error: CacheUnavailable, what: str) -> None:
    """Fail open for reads (logged), closed for writes (503 with Retry-After)."""
    # Imported here: DRF imports authentication classes while rest_framework.views loads, and
    # portal.exceptions imports rest_framework.views.
    from portal.exceptions import ServiceUnavailable

    if request.method in SAFE_METHODS:
        logger.warning("cache unavailable (%s); %s skipped for a read", error, what)
        return
    logger.warning("cache unavailable (%s); write refused with 503", error)
    raise ServiceUnavailable(
        "The portal's cache is unavailable, so changes cannot be accepted now; "
        "reading still works. Try again shortly."
    ) from error


class ThrottledTokenAuthentication(TokenAuthentication):
    def authenticate(self, request):
        if not request.META.get("HTTP_AUTHORIZATION", "").lower().startswith("token"):
            return None
        rate = Rate.parse(settings.API_TOKEN_FAILURE_THROTTLE)
        key = f"throttle:token-failures:{BaseThrottle().get_ident(request)}"
        try:
            blocked, remaining = exceeded(key, rate)
        except CacheUnavailable as error:
            cache_down(request, error, "the token guessing throttle")
            blocked, remaining = False, 0
        if blocked:
            raise Throttled(wait=remaining, detail="Too many failed API token attempts.")
        try:
            return super().authenticate(request)
        except AuthenticationFailed:
            try:
                hit(key, rate)
            except CacheUnavailable as error:
                logger.warning("cache unavailable (%s); failed token attempt not counted", error)
            raise
