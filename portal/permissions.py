"""Access to the operational and documentation endpoints (settings METRICS_*, API_DOCS_PUBLIC)."""

import hmac

from django.conf import settings
from rest_framework.permissions import BasePermission


class ApiDocsAccess(BasePermission):
    """The OpenAPI schema and Swagger UI: any logged-in user or token, or anyone when
    API_DOCS_PUBLIC is on (read at request time, so it can change without a restart)."""

    def has_permission(self, request, view) -> bool:
        return settings.API_DOCS_PUBLIC or bool(request.user and request.user.is_authenticated)


def metrics_allowed(request) -> bool:
    """/metrics: METRICS_PUBLIC, a logged-in user, or `Authorization: Bearer <METRICS_TOKEN>`."""
    if settings.METRICS_PUBLIC or request.user.is_authenticated:
        return True
    token = settings.METRICS_TOKEN
    scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(given, token)
