"""Sign-in with the identity provider (OIDC authorization code flow with PKCE), its callback,
and a logout that also ends the IdP session. Every refusal is a page that says what went wrong;
nothing is written on a refusal."""

import logging
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib.auth.views import LogoutView
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.views import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from apps.sso import discovery
from apps.sso.services import SsoLoginRefused

logger = logging.getLogger(__name__)


def _error_page(request, *, code: str, message: str, status: int):
    logger.warning(
        "sso sign-in refused: %s: %s (from %s)", code, message, request.META.get("REMOTE_ADDR")
    )
    return render(
        request,
        "sso/login_error.html",
        {
            "code": code,
            "message": message,
            "password_login_enabled": settings.PASSWORD_LOGIN_ENABLED,
        },
        status=status,
    )


def _require_sso() -> None:
    if not settings.SSO_ENABLED:
        raise Http404("Single sign-on is not configured.")


class SsoLoginView(OIDCAuthenticationRequestView):
    """Redirects the browser to the IdP's authorization endpoint (state, nonce, PKCE S256)."""

    def __init__(self, **kwargs):
        # The library reads the endpoint here; it comes from discovery, read in get().
        View.__init__(self, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request):
        _require_sso()
        try:
            self.OIDC_OP_AUTH_ENDPOINT = discovery.endpoint("authorization_endpoint")
        except discovery.DiscoveryError as error:
            return _error_page(request, code="idp_unavailable", message=str(error), status=503)
        return super().get(request)


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """Where the IdP sends the browser back with a code; signs the user in or says why not."""

    def get(self, request):
        _require_sso()
        if request.GET.get("error"):
            description = request.GET.get("error_description") or request.GET["error"]
            super().get(request)  # forgets the state and signs out whoever was signed in
            return _error_page(
                request,
                code="idp_refused",
                message=f"The identity provider did not sign you in: {description[:200]}",
                status=400,
            )
        state = request.GET.get("state")
        if not request.GET.get("code") or not state:
            return _error_page(
                request,
                code="invalid_callback",
                message="The identity provider's answer lacks the code or state.",
                status=400,
            )
        if state not in request.session.get("oidc_states", {}):
            return _error_page(
                request,
                code="state_mismatch",
                message=(
                    "This sign-in answer does not belong to a sign-in started in this browser "
                    "(unknown or already used state). Start again."
                ),
                status=400,
            )
        try:
            return super().get(request)
        except SsoLoginRefused as error:
            return _error_page(
                request, code=error.code, message=error.message, status=error.status_code
            )
        except SuspiciousOperation as error:
            return _error_page(request, code="invalid_token", message=str(error), status=400)
        except discovery.DiscoveryError as error:
            return _error_page(request, code="idp_unavailable", message=str(error), status=503)
        except requests.HTTPError as error:
            # The token endpoint refused the code (used twice, expired, wrong client secret).
            logger.warning("sso token exchange failed: %s", error)
            return _error_page(
                request,
                code="token_exchange_failed",
                message="The identity provider refused to exchange the sign-in code. Start again.",
                status=400,
            )
        except requests.RequestException as error:
            return _error_page(
                request,
                code="idp_unavailable",
                message=f"The identity provider did not answer ({error.__class__.__name__}).",
                status=503,
            )

    def login_failure(self):
        return _error_page(
            self.request,
            code="login_failed",
            message="The identity provider did not sign you in. Start again.",
            status=400,
        )


class PortalLogoutView(LogoutView):
    """Django's logout; after an SSO sign-in it also ends the session at the IdP."""

    def post(self, request, *args, **kwargs):
        id_token = request.session.get("oidc_id_token")
        response = super().post(request, *args, **kwargs)
        if not (settings.SSO_ENABLED and id_token):
            return response
        try:
            end_session = discovery.endpoint("end_session_endpoint")
        except discovery.DiscoveryError:
            end_session = None
        if not end_session:
            return response
        back = request.build_absolute_uri(resolve_url(settings.LOGOUT_REDIRECT_URL))
        query = urlencode(
            {
                "id_token_hint": id_token,
                "post_logout_redirect_uri": back,
                "client_id": settings.OIDC_RP_CLIENT_ID,
            }
        )
        return HttpResponseRedirect(f"{end_session}?{query}")
