from datetime import UTC, datetime, timedelta

from django import forms
from django.utils import timezone

from apps.fleet.models import GpuModel
from apps.teams.models import Team


class LocalDateTimeField(forms.DateTimeField):
    """A datetime-local input; the browser sends its UTC offset in `tz_offset` (minutes, as JS
    getTimezoneOffset gives it). Without JavaScript the time is read in the reader's zone."""

    widget = forms.DateTimeInput(attrs={"type": "datetime-local", "step": 900})


def _apply_offset(value, offset_minutes: int | None):
    if value is None or offset_minutes is None:
        # Without the browser's offset the field has read the time in the reader's zone.
        return value
    # The field made the typed wall time aware in the server's zone (TIME_ZONE); undo that in
    # the same zone to get the typed time back, then shift it by the browser's offset.
    naive = timezone.make_naive(value) if timezone.is_aware(value) else value
    return (naive + timedelta(minutes=offset_minutes or 0)).replace(tzinfo=UTC)


def searched_start(query) -> datetime | None:
    """The start typed in the booking form (`start` with the browser's `tz_offset`), as UTC;
    None when absent or not a date and time (the search then starts now)."""
    try:
        typed = LocalDateTimeField(required=False).clean(query.get("start") or "")
        offset = forms.IntegerField(required=False, min_value=-900, max_value=900).clean(
            query.get("tz_offset") or ""
        )
    except forms.ValidationError:
        return None
    return _apply_offset(typed, offset)


class ReservationForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    gpu_model = forms.ModelChoiceField(
        queryset=GpuModel.objects.all(), to_field_name="name", empty_label=None, label="GPU model"
    )
    count = forms.IntegerField(min_value=1, max_value=100_000, initial=1, label="GPUs")
    start = LocalDateTimeField()
    duration_hours = forms.DecimalField(
        min_value=0.25, max_value=24 * 365, decimal_places=2, initial=4, label="Duration (hours)"
    )
    same_node = forms.BooleanField(required=False, label="All GPUs on one node")
    purpose = forms.CharField(max_length=500, required=False)
    tz_offset = forms.IntegerField(
        required=False, widget=forms.HiddenInput, min_value=-900, max_value=900
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = Team.objects.member_of(user)
        self.fields["team"].to_field_name = "slug"

    def clean(self):
        data = super().clean()
        if data.get("start") is not None:
            data["start"] = _apply_offset(data["start"], data.get("tz_offset"))
            if data.get("duration_hours") is not None:
                data["end"] = data["start"] + timedelta(hours=float(data["duration_hours"]))
        return data


class ExtendForm(forms.Form):
    extra_hours = forms.DecimalField(min_value=0.25, max_value=24 * 7, decimal_places=2, initial=1)


class CancelForm(forms.Form):
    reason = forms.CharField(max_length=2000, required=False)
