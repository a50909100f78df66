"""Render each request in its reader's time zone (portal/timezones.py says which)."""

from django.utils import timezone

from apps.teams.services import user_time_zone_learn
from portal.timezones import BROWSER_ZONE_COOKIE, zone_or_none


class UserTimeZoneMiddleware:
    """Activates the user's chosen zone, else the zone their browser reports, for the request.
    A signed-in user without a chosen zone keeps the browser's, so e-mails use it as well."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        browser_zone = request.COOKIES.get(BROWSER_ZONE_COOKIE, "")
        user = getattr(request, "user", None)
        chosen = ""
        if user is not None and user.is_authenticated:
            chosen = user.time_zone
            if not chosen and user_time_zone_learn(user=user, name=browser_zone):
                chosen = user.time_zone
        zone = zone_or_none(chosen) or zone_or_none(browser_zone)
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
