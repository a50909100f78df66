"""Refuse requests the database or the parsers cannot take, before any view reads them.

PostgreSQL text cannot hold NUL bytes: a NUL in a query parameter or the path reaches a
filter and the database answers DataError (a 500). A body over DATA_UPLOAD_MAX_MEMORY_SIZE
makes Django raise RequestDataTooBig, which it renders as an HTML page. Both are the client's
mistake: API callers get 400/413 in the error envelope, pages a plain 400/413. Form posts to
pages are checked here too (API bodies are checked by the API's parsers, portal.parsers).
"""

from django.conf import settings
from django.http import HttpResponse, JsonResponse

API_PREFIX = "/api/"
NUL = "\x00"


def error_body(code: str, message: str, detail: dict | None = None) -> dict:
    """The API's one error shape (see portal.exceptions)."""
    return {"code": code, "message": message, "detail": detail or {}}


def refusal(request, status: int, code: str, message: str, detail: dict | None = None):
    if request.path.startswith(API_PREFIX):
        return JsonResponse(error_body(code, message, detail), status=status)
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


def nul_fields(data) -> list[str]:
    """Names of the fields of a QueryDict whose name or values contain a NUL byte."""
    return sorted(
        {
            name.replace(NUL, "\\x00")
            for name, values in data.lists()
            if NUL in name or any(isinstance(value, str) and NUL in value for value in values)
        }
    )


def is_form_post(request) -> bool:
    return request.method == "POST" and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    )


def declared_length(request) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


class RequestLimitsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if NUL in request.path:
            return refusal(request, 400, "invalid", "Null characters are not allowed in the URL.")
        names = nul_fields(request.GET)
        if names:
            return refusal(
                request,
                400,
                "invalid",
                "Null characters are not allowed in query parameters.",
                {name: ["Null characters are not allowed."] for name in names},
            )
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and declared_length(request) > limit:
            return refusal(
                request,
                413,
                "too_large",
                f"The request body is larger than the limit of {limit} bytes.",
                {"limit_bytes": limit},
            )
        if not request.path.startswith(API_PREFIX) and is_form_post(request):
            names = nul_fields(request.POST)
            if names:
                return refusal(request, 400, "invalid", "Null characters are not allowed.")
        return self.get_response(request)
