"""Token authentication that throttles guessing: failed token attempts are counted per client
address in the shared cache; past API_TOKEN_FAILURE_THROTTLE every token from that address is
refused with 429 until the window ends, so valid tokens cannot be found by trying."""

from django.conf import settings
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.throttling import BaseThrottle

from portal.rate_limits import Rate, exceeded, hit


class ThrottledTokenAuthentication(TokenAuthentication):
    def authenticate(self, request):
        if not request.META.get("HTTP_AUTHORIZATION", "").lower().startswith("token"):
            return None
        rate = Rate.parse(settings.API_TOKEN_FAILURE_THROTTLE)
        key = f"throttle:token-failures:{BaseThrottle().get_ident(request)}"
        blocked, remaining = exceeded(key, rate)
        if blocked:
            raise Throttled(wait=remaining, detail="Too many failed API token attempts.")
        try:
            return super().authenticate(request)
        except AuthenticationFailed:
            hit(key, rate)
            raise
