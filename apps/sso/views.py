"""Sign-in with the identity provider (OIDC authorization code flow with PKCE), its callback,
and a logout that also ends the IdP session. Every refusal is a page that says what went wrong;
nothing is written on a refusal."""

import logging
from urllib.parse import parse_qs, urlencode, urlparse

import requests
from django.conf import settings
from django.contrib import auth, messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.contrib.auth.views import LogoutView
from django.core.exceptions import PermissionDenied, SuspiciousOperation, ValidationError
from django.http import HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.views import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from apps.sso import discovery
from apps.sso.models import SsoIdentity
from apps.sso.services import SsoLoginRefused, sso_identity_link
from apps.teams.models import User
from portal.exceptions import ApplicationError
from portal.roles import is_platform_admin

# Session key of a pending "link my IdP account": the state of the sign-in it started and the
# user who started it.
LINK_SESSION_KEY = "sso_link"

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


def sso_not_configured(request):
    """What every SSO address shows on a portal without an identity provider: a page of the
    portal saying so (404, as the address leads nowhere), never Django's debug page."""
    # Passwords are always on here: the settings refuse PASSWORD_LOGIN=0 without an issuer.
    return render(request, "sso/not_configured.html", status=404)


class SsoConfiguredMixin:
    """First in a view's bases: without an identity provider the view answers the
    not-configured page before anything else (sign-in checks, the OIDC library) runs."""

    def dispatch(self, request, *args, **kwargs):
        if not settings.SSO_ENABLED:
            return sso_not_configured(request)
        return super().dispatch(request, *args, **kwargs)


def sso_start_view(request):
    """/sso/: the sign-in when SSO is configured, else the page saying it is not."""
    if not settings.SSO_ENABLED:
        return sso_not_configured(request)
    query = f"?{request.GET.urlencode()}" if request.GET else ""
    return HttpResponseRedirect(reverse("sso:login") + query)


class SsoLoginView(SsoConfiguredMixin, OIDCAuthenticationRequestView):
    """Redirects the browser to the IdP's authorization endpoint (state, nonce, PKCE S256)."""

    def __init__(self, **kwargs):
        # The library reads the endpoint here; it comes from discovery, read in get().
        View.__init__(self, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request):
        try:
            self.OIDC_OP_AUTH_ENDPOINT = discovery.endpoint("authorization_endpoint")
        except discovery.DiscoveryError as error:
            return _error_page(request, code="idp_unavailable", message=str(error), status=503)
        return super().get(request)


class SsoCallbackView(SsoConfiguredMixin, OIDCAuthenticationCallbackView):
    """Where the IdP sends the browser back with a code; signs the user in or says why not."""

    def get(self, request):
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
        link = request.session.pop(LINK_SESSION_KEY, None)
        if (
            link
            and link.get("state") == state
            and request.user.is_authenticated
            and link.get("user") == request.user.pk
        ):
            request.sso_link_user = request.user
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


class SsoLinkView(SsoConfiguredMixin, LoginRequiredMixin, View):
    """A user signed in with their password links their IdP account to their portal user:
    they confirm the password here, sign in at the IdP, and the callback links the account
    that comes back (sso_user_sync with link_to). The only way besides a platform admin."""

    template_name = "sso/link.html"

    def _page(self, request, *, error: str = "", status: int = 200):
        identity = SsoIdentity.objects.filter(user=request.user).first()
        return render(
            request,
            self.template_name,
            {"identity": identity, "error": error, "issuer": settings.OIDC_ISSUER},
            status=status,
        )

    def get(self, request):
        return self._page(request)

    def post(self, request):
        if SsoIdentity.objects.filter(user=request.user).exists():
            return self._page(request, error="Your account is already linked.", status=409)
        # authenticate(), not check_password(): failed confirmations count towards the
        # lockout like failed logins, so a stolen session cannot guess the password.
        confirmed = auth.authenticate(
            request, username=request.user.get_username(), password=request.POST.get("password", "")
        )
        if confirmed is None or confirmed.pk != request.user.pk:
            return self._page(request, error="That is not your password.", status=400)
        start = SsoLoginView()
        start.setup(request)
        response = start.get(request)
        location = response.get("Location", "")
        state = parse_qs(urlparse(location).query).get("state", [""])[0]
        if response.status_code != 302 or not state:
            return response
        request.session[LINK_SESSION_KEY] = {"state": state, "user": request.user.pk}
        request.session["oidc_login_next"] = reverse("sso:link")
        return response


class SsoIdentityLinkView(SsoConfiguredMixin, LoginRequiredMixin, View):
    """A platform admin links an IdP account (its subject, as the SSO identities list on the
    admin site shows it) to an existing portal user, or moves it there from the user its first
    sign-in created. Audited (sso_identity.link)."""

    template_name = "sso/identity_link.html"

    def dispatch(self, request, *args, **kwargs):
        if not settings.SSO_ENABLED:
            return sso_not_configured(request)
        if request.user.is_authenticated and not is_platform_admin(request.user):
            raise PermissionDenied("Only platform admins link identity provider accounts.")
        return super().dispatch(request, *args, **kwargs)

    def _page(self, request, *, errors: dict | None = None, status: int = 200):
        context = {
            "issuer": settings.OIDC_ISSUER,
            "errors": errors or {},
            "values": {
                "username": request.POST.get("username", request.GET.get("username", "")),
                "subject": request.POST.get("subject", request.GET.get("subject", "")),
            },
        }
        return render(request, self.template_name, context, status=status)

    def get(self, request):
        return self._page(request)

    def post(self, request):
        username = request.POST.get("username", "").strip()
        subject = request.POST.get("subject", "").strip()
        user = User.objects.filter(username=username).first() if username else None
        if user is None:
            return self._page(
                request, errors={"username": [f"No portal user “{username}”."]}, status=400
            )
        try:
            sso_identity_link(
                user=user,
                issuer=settings.OIDC_ISSUER,
                subject=subject,
                actor=request.user,
                reason=request.POST.get("reason", "").strip()[:500],
            )
        except ValidationError as error:
            return self._page(request, errors=error.message_dict, status=400)
        except ApplicationError as error:
            return self._page(request, errors={"general": error.message}, status=409)
        messages.success(request, f"Linked the identity provider account {subject} to {username}.")
        return HttpResponseRedirect(reverse("sso:identity-link"))


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
