from django import forms
from django.core.exceptions import ValidationError

from apps.fleet.models import GpuModel
from apps.teams.choices import TeamRole
from apps.teams.models import Team, User
from apps.teams.services import quota_numbers_check


class MembershipAddForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")
    role = forms.ChoiceField(choices=TeamRole.choices, initial=TeamRole.MEMBER)

    def clean_username(self) -> User:
        username = self.cleaned_data["username"].strip()
        try:
            return User.objects.get(username=username, is_active=True)
        except User.DoesNotExist:
            raise forms.ValidationError(f"No active user named “{username}”.") from None


class MembershipRoleForm(forms.Form):
    role = forms.ChoiceField(choices=TeamRole.choices)


class QuotaForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.all(), to_field_name="slug")
    gpu_model = forms.ModelChoiceField(
        queryset=GpuModel.objects.all(),
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
                self.add_error(None, invalid)
        return data
