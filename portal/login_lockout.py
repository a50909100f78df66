"""Login lockouts: the two limits (django-axes' AXES_HANDLER) and what a locked-out login sees
(AXES_LOCKOUT_CALLABLE).

Axes locks a (username, address) pair after AXES_FAILURE_LIMIT failures. Password spraying
(one or two guesses for each of many usernames) never reaches that, so an address is locked for
every username after LOGIN_ADDRESS_FAILURE_LIMIT failures in the same cool-off window.
"""

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.http import JsonResponse
from django.shortcuts import render

from portal.request_limits import API_PREFIX, error_body

LOCKOUT_STATUS = 429
USER, ADDRESS = "user", "address"  # the two lockout scopes


class PortalAxesHandler(AxesDatabaseHandler):
    def get_failures(self, request, credentials=None) -> int:
        """Failures of the pair, or of the address scaled onto the pair's limit when that is
        nearer its own limit: axes compares one number with AXES_FAILURE_LIMIT. The true
        counts of both stay on the request for the audit (`lockouts_started`)."""
        pair = super().get_failures(request, credentials)
        address_limit = settings.LOGIN_ADDRESS_FAILURE_LIMIT
        address = 0
        if address_limit:
            address = (
                AccessAttempt.objects.filter(
                    ip_address=request.axes_ip_address,
                    attempt_time__gte=get_cool_off_threshold(request),
                ).aggregate(n=Sum("failures_since_start"))["n"]
                or 0
            )
        request.portal_login_failures = {USER: pair, ADDRESS: address}
        request.portal_address_locked = bool(address_limit) and address >= address_limit
        if not address_limit:
            return pair
        return max(pair, address * settings.AXES_FAILURE_LIMIT // address_limit)

    def is_allowed(self, request, credentials=None) -> bool:
        """Checked before each log-in attempt counts: what is locked then is not a new
        lockout when axes signals one after the attempt failed."""
        allowed = super().is_allowed(request, credentials)
        request.portal_locked_before = set(_locked(request))
        return allowed


def _locked(request) -> dict[str, int]:
    """The scopes locked by the failures last counted for this request, with their counts."""
    limits = {USER: settings.AXES_FAILURE_LIMIT, ADDRESS: settings.LOGIN_ADDRESS_FAILURE_LIMIT}
    failures = getattr(request, "portal_login_failures", {})
    return {scope: n for scope, n in failures.items() if limits[scope] and n >= limits[scope]}


def lockouts_started(request) -> dict[str, int]:
    """The lockouts (scope -> true failure count) that this request's failed attempt began.

    Axes sends `user_locked_out` again for every attempt refused while a lockout lasts; those
    began nothing. A lockout after an unlock (axes_reset) or after the cool-off is a new one.
    """
    before = getattr(request, "portal_locked_before", set())
    return {scope: n for scope, n in _locked(request).items() if scope not in before}


def lockout_message(*, whole_address: bool = False) -> str:
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    who = "from your address" if whole_address else "for this user from your address"
    return (
        f"Too many failed log-ins {who}: log-in is locked for {minutes} minutes after the "
        "last attempt, even with the right password. Wait, or ask a platform admin to unlock it."
    )


def lockout_response(request, original_response=None, credentials=None):
    message = lockout_message(whole_address=getattr(request, "portal_address_locked", False))
    wants_json = request.path.startswith(API_PREFIX) or (
        request.headers.get("x-requested-with") == "XMLHttpRequest"
    )
    if wants_json:
        return JsonResponse(error_body("locked_out", message), status=LOCKOUT_STATUS)
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    return render(
        request,
        "registration/login.html",
        {"lockout_message": message, "username": username, "next": request.POST.get("next", "")},
        status=LOCKOUT_STATUS,
    )
