"""What a locked-out login sees (django-axes' AXES_LOCKOUT_CALLABLE)."""

from django.conf import settings
from django.http import JsonResponse
from django.shortcuts import render

from portal.request_limits import API_PREFIX, error_body

LOCKOUT_STATUS = 429


def lockout_message() -> str:
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    return (
        f"Too many failed log-ins for this user from your address: log-in is locked for "
        f"{minutes} minutes after the last attempt, even with the right password. Wait, or ask "
        "a platform admin to unlock it."
    )


def lockout_response(request, original_response=None, credentials=None):
    message = lockout_message()
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
