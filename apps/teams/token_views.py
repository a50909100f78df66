"""The API tokens page: list, create (key shown once), revoke."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.teams import tokens
from apps.teams.choices import ApiTokenScope
from apps.teams.models import ApiToken
from portal.exceptions import ApplicationError

# The new key travels from the POST to the next GET in the session and is removed when shown.
NEW_KEY_SESSION = "api_token_new_key"


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
def api_token_list_view(request):
    form = ApiTokenCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            token, key = tokens.api_token_create(user=request.user, **form.cleaned_data)
        except ValidationError as error:
            for field, field_errors in error.message_dict.items():
                form.add_error(field if field in form.fields else None, field_errors)
        else:
            request.session[NEW_KEY_SESSION] = {"id": token.pk, "key": key}
            messages.success(
                request,
                f"Token “{token.name}” created. Copy it now: it will not be shown again.",
            )
            return redirect("teams:api-token")
    new_key = request.session.pop(NEW_KEY_SESSION, None) if request.method == "GET" else None
    return render(
        request,
        "teams/api_token.html",
        {"tokens": tokens.api_tokens_of(user=request.user), "form": form, "new_key": new_key},
        status=400 if form.errors else 200,
    )


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
