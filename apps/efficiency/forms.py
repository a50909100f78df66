from datetime import timedelta

from django import forms
from django.conf import settings
from django.http import Http404
from django.utils import timezone

from apps.efficiency.advice import Filters, FindingKind
from apps.teams.models import Team
from portal.timezones import day_start

MAX_WINDOW = timedelta(days=366)


class AdviceFilterForm(forms.Form):
    """The window (whole days in the reader's zone, `until` included) and what to narrow the
    advice to."""

    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    team = forms.SlugField(required=False)
    user = forms.CharField(required=False, max_length=150, label="User")
    kind = forms.ChoiceField(
        required=False,
        choices=[("", "jobs and bookings"), ("job", "jobs"), ("booking", "bookings")],
    )
    finding = forms.ChoiceField(
        required=False, choices=[("", "any finding"), *FindingKind.LABELS.items()]
    )

    def clean(self):
        data = super().clean()
        now = timezone.now()
        until = data.get("until")
        end = day_start(until + timedelta(days=1)) if until else now
        since = data.get("since")
        start = day_start(since) if since else end - timedelta(days=settings.EFFICIENCY_WINDOW_DAYS)
        if end <= start:
            raise forms.ValidationError("The window must end after it starts.")
        if end - start > MAX_WINDOW:
            raise forms.ValidationError("Choose a window of at most 366 days.")
        data["start"], data["end"] = start, min(end, now)
        return data

    def filters(self, *, user) -> Filters:
        """The validated filters; a team the user may not see does not exist for them (404)."""
        data = self.cleaned_data
        if data.get("team") and not Team.objects.for_user(user).filter(slug=data["team"]).exists():
            raise Http404("No such team.")
        return Filters(
            start=data["start"],
            end=data["end"],
            team=data.get("team") or None,
            user=data.get("user") or None,
            kind=data.get("kind") or None,
            finding=data.get("finding") or None,
        )
