"""Forms of the organisation units page; the services make every decision."""

from django import forms
from django.core.exceptions import ValidationError

from apps.fleet.models import GpuModel
from apps.teams.models import OrgUnit, Team, User
from apps.teams.services import quota_numbers_check


class UnitCreateForm(forms.Form):
    slug = forms.CharField(
        max_length=50, help_text="Lowercase letters, digits and hyphens; used in addresses."
    )
    name = forms.CharField(max_length=200)
    cost_center = forms.CharField(max_length=64, required=False, label="Cost center")


class UnitMoveForm(forms.Form):
    parent = forms.ModelChoiceField(
        queryset=OrgUnit.objects.none(), to_field_name="slug", label="New parent unit"
    )

    def __init__(self, *args, units=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["parent"].queryset = units if units is not None else OrgUnit.objects.none()


class TeamMoveForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="slug")
    unit = forms.ModelChoiceField(
        queryset=OrgUnit.objects.none(), to_field_name="slug", label="Into unit"
    )

    def __init__(self, *args, teams=None, units=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams if teams is not None else Team.objects.none()
        self.fields["unit"].queryset = units if units is not None else OrgUnit.objects.none()


class UnitQuotaForm(forms.Form):
    gpu_model = forms.ModelChoiceField(
        queryset=GpuModel.objects.order_by("name"),
        to_field_name="name",
        required=False,
        empty_label="any model",
        label="GPU model",
    )
    guaranteed = forms.IntegerField(min_value=0, max_value=1_000_000)
    limit = forms.IntegerField(min_value=0, max_value=1_000_000)

    def clean(self):
        data = super().clean()
        guaranteed, limit = data.get("guaranteed"), data.get("limit")
        if guaranteed is not None and limit is not None:
            try:
                quota_numbers_check(guaranteed=guaranteed, limit=limit)
            except ValidationError as invalid:
                for field, messages in invalid.message_dict.items():
                    self.add_error(field, messages)
        return data


class UnitAdminForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")

    def clean_username(self) -> User:
        username = self.cleaned_data["username"].strip()
        try:
            return User.objects.get(username=username, is_active=True)
        except User.DoesNotExist:
            raise forms.ValidationError(f"No active user named “{username}”.") from None
