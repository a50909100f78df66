from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import BaseThrottle

from portal.authentication import cache_down
from portal.rate_limits import CacheUnavailable, Rate, hit


class WriteRateThrottle(BaseThrottle):
    """Per-user limit on API writes (rate: REST_FRAMEWORK DEFAULT_THROTTLE_RATES["writes"]),
    counted in the shared cache so it holds across all web processes (anonymous callers by
    address; they are refused by authentication anyway). Without the cache, writes are refused
    with 503 (portal.authentication.cache_down)."""

    scope = "writes"

    def __init__(self) -> None:
        self.wait_seconds: float | None = None

    def allow_request(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return True
        rate = Rate.parse(settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"][self.scope])
        user = request.user
        if user and user.is_authenticated:
            ident = f"user:{user.pk}"
        else:
            ident = f"ip:{self.get_ident(request)}"
        try:
            allowed, remaining = hit(f"throttle:{self.scope}:{ident}", rate)
        except CacheUnavailable as error:
            cache_down(request, error, "the write throttle")  # raises: this is a write
            return True
        if not allowed:
            self.wait_seconds = remaining
        return allowed

    def wait(self) -> float | None:
        return self.wait_seconds
