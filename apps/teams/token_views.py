"""The API tokens page: list, create (key shown once), revoke."""

import secrets

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from apps.teams import tokens
from apps.teams.choices import ApiTokenScope
from apps.teams.models import ApiToken
from portal.exceptions import ApplicationError

# The new key crosses the redirect to the page that shows it split in two halves: a one-time pad
# in a short-lived cookie and the key XOR the pad in the session. Neither half alone says
# anything about the key, so the session store never holds it; showing the key removes both.
NEW_KEY_SESSION = "api_token_new_key"
NEW_KEY_COOKIE = "api_token_pad"
NEW_KEY_COOKIE_SECONDS = 120


def _xor(data: bytes, pad: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, pad, strict=True))


def _seal_new_key(request, response, key: str) -> None:
    pad = secrets.token_bytes(len(key.encode()))
    request.session[NEW_KEY_SESSION] = _xor(key.encode(), pad).hex()
    response.set_cookie(
        NEW_KEY_COOKIE,
        pad.hex(),
        max_age=NEW_KEY_COOKIE_SECONDS,
        path=request.path,
        secure=settings.SESSION_COOKIE_SECURE,
        httponly=True,
        samesite="Strict",
    )


def _unseal_new_key(request) -> str | None:
    """The new key if both halves are here (removing the session's half), else None."""
    sealed = request.session.pop(NEW_KEY_SESSION, None)
    pad = request.COOKIES.get(NEW_KEY_COOKIE)
    if sealed is None or pad is None:
        return None
    try:
        return _xor(bytes.fromhex(sealed), bytes.fromhex(pad)).decode("ascii")
    except ValueError:  # a cookie that is not the pad (edited, or of another key)
        return None


class ApiTokenCreateForm(forms.Form):
    name = forms.CharField(max_length=100, label="Name")
    scope = forms.ChoiceField(
        choices=ApiTokenScope.choices, initial=ApiTokenScope.READ_ONLY, label="Scope"
    )
    expires_in_days = forms.TypedChoiceField(
        choices=[(days, f"{days} days") for days in tokens.EXPIRY_CHOICES_DAYS],
        coerce=int,
        initial=90,
        label="Expires after",
    )


@login_required
@never_cache
def api_token_list_view(request):
    form = ApiTokenCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            token, key = tokens.api_token_create(user=request.user, **form.cleaned_data)
        except ValidationError as error:
            for field, field_errors in error.message_dict.items():
                form.add_error(field if field in form.fields else None, field_errors)
        else:
            messages.success(
                request,
                f"Token “{token.name}” created. Copy it now: it will not be shown again.",
            )
            response = redirect("teams:api-token")
            _seal_new_key(request, response, key)
            return response
    new_key = _unseal_new_key(request) if request.method == "GET" else None
    response = render(
        request,
        "teams/api_token.html",
        {"tokens": tokens.api_tokens_of(user=request.user), "form": form, "new_key": new_key},
        status=400 if form.errors else 200,
    )
    if NEW_KEY_COOKIE in request.COOKIES:
        response.delete_cookie(NEW_KEY_COOKIE, path=request.path, samesite="Strict")
    return response


@login_required
@require_POST
def api_token_revoke_view(request, pk: int):
    # Another user's token does not exist for this page (404), whoever asks.
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    try:
        tokens.api_token_revoke(token=token, actor=request.user)
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Token “{token.name}” revoked: it no longer works.")
    return redirect("teams:api-token")
