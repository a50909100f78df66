"""One error family for business rules, and the API handler that renders every error alike.

Services raise `ApplicationError` subclasses (or Django's ValidationError); the API answers
`{"code", "message", "detail"}` with the status the subclass carries.
"""

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class ApplicationError(Exception):
    """A business rule refused the operation; `code` is stable for API clients."""

    code = "error"
    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(self, message: str, *, code: str | None = None, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.detail = detail or {}


class ConflictError(ApplicationError):
    code = "conflict"
    status_code = status.HTTP_409_CONFLICT


class PolicyRefusal(ApplicationError):
    """Refused by policy (quota, budget, role), with a reason code."""

    code = "forbidden"
    status_code = status.HTTP_403_FORBIDDEN


# How long a client told "briefly unavailable" (503) waits before asking again (Retry-After).
RETRY_AFTER_SECONDS = 30


class ServiceUnavailable(drf_exceptions.APIException):
    """A service the request needs is down: 503 with Retry-After (DRF sends `wait` as it)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The service is briefly unavailable; try again shortly."
    default_code = "unavailable"

    def __init__(self, detail: str | None = None, *, wait: int = RETRY_AFTER_SECONDS) -> None:
        super().__init__(detail)
        self.wait = wait


def _body(code: str, message: str, detail: Any = None) -> dict:
    return {"code": code, "message": message, "detail": detail or {}}


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, ApplicationError):
        return Response(_body(exc.code, exc.message, exc.detail), status=exc.status_code)
    # Raised while DRF reads the body (too large, too many fields); Django would answer an
    # HTML page. RequestLimitsMiddleware catches most by Content-Length before this.
    if isinstance(exc, RequestDataTooBig):
        return Response(
            _body("too_large", "The request body is too large."),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, SuspiciousOperation):
        return Response(_body("invalid", "The request was refused: " + str(exc)), status=400)
    if isinstance(exc, DjangoValidationError):
        detail = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = drf_exceptions.ValidationError(detail)
    elif isinstance(exc, Http404):
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf_exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, drf_exceptions.ValidationError):
        response.data = _body("invalid", "The request has invalid fields.", response.data)
    else:
        message = response.data.get("detail", "") if isinstance(response.data, dict) else ""
        code = getattr(message, "code", None) or getattr(exc, "default_code", "error")
        response.data = _body(str(code), str(message))
    return response


def show_on_form(form, error: Exception, *, field_names: dict | None = None) -> None:
    """Show a service refusal on a Django form: field errors by field (`field_names` maps a
    service's field to the form's where they differ), the rest on top, so pages give the same
    messages as the API, inline."""
    from django.core.exceptions import ValidationError

    if isinstance(error, ValidationError) and hasattr(error, "error_dict"):
        for field, errors in error.message_dict.items():
            field = (field_names or {}).get(field, field)
            form.add_error(field if field in form.fields else None, errors)
    elif isinstance(error, ValidationError):
        form.add_error(None, error.messages)
    else:
        form.add_error(None, getattr(error, "message", str(error)))
