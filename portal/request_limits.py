"""Refuse requests the database or the parsers cannot take, before any view reads them.

PostgreSQL text cannot hold NUL bytes, and a lone surrogate cannot even be encoded for it
(portal.pg_text): such text in the path, a query parameter, a header or a cookie (API tokens
and the session cookie are looked up in the database) reaches a query and the database answers
DataError (a 500). A body over DATA_UPLOAD_MAX_MEMORY_SIZE makes Django raise
RequestDataTooBig, which it renders as an HTML page. All are the client's mistake: API callers
get 400/413 in the error envelope, pages a plain 400/413. Form posts to pages are checked here
too (API bodies are checked by the API's parsers, portal.parsers).
"""

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from portal.pg_text import said_where, storable, text_problem

API_PREFIX = "/api/"


def error_body(code: str, message: str, detail: dict | None = None) -> dict:
    """The API's one error shape (see portal.exceptions)."""
    return {"code": code, "message": message, "detail": detail or {}}


def refusal(request, status: int, code: str, message: str, detail: dict | None = None):
    if request.path.startswith(API_PREFIX):
        return JsonResponse(error_body(code, message, detail), status=status)
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


def unstorable_fields(pairs) -> dict[str, list[str]]:
    """{name: [why]} of the (name, values) pairs whose name or a value cannot be stored."""
    refused = {}
    for name, values in pairs:
        for text in (name, *values):
            problem = text_problem(text) if isinstance(text, str) else ""
            if problem:
                refused[storable(name)] = [problem]
                break
    return refused


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


def _first(refused: dict[str, list[str]], place: str) -> str:
    """The first reason, saying where: "Null characters are not allowed in cookies."."""
    return said_where(next(iter(refused.values()))[0], place)


def _text_refusal(request):
    """A 400 for unstorable text in the path, query, headers or cookies, or None."""
    problem = text_problem(request.path, place="in the URL")
    if problem:
        return refusal(request, 400, "invalid", problem)
    refused = unstorable_fields(request.GET.lists())
    if refused:
        return refusal(request, 400, "invalid", _first(refused, "in query parameters"), refused)
    # A token is looked up in the database, a user agent stored with a failed login.
    # (Cookies are checked one by one below, so that the bad ones can be dropped.)
    headers = ((name, [value]) for name, value in request.headers.items() if name != "Cookie")
    refused = unstorable_fields(headers)
    if refused:
        return refusal(request, 400, "invalid", _first(refused, "in headers"), refused)
    refused = unstorable_fields((name, [value]) for name, value in request.COOKIES.items())
    if refused:
        response = refusal(request, 400, "invalid", _first(refused, "in cookies"), refused)
        # Forget them, so the browser's next request is not refused again.
        for name in request.COOKIES.keys() & refused.keys():
            response.delete_cookie(name)
        return response
    return None


class RequestLimitsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = _text_refusal(request)
        if response is not None:
            return response
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
            refused = unstorable_fields(request.POST.lists())
            if refused:
                return refusal(request, 400, "invalid", _first(refused, "in the form"))
        return self.get_response(request)
