"""Forms of the organisation units page; the services make every decision."""

from django import forms

from apps.teams.forms import ActiveUserField, QuotaNumbersForm
from apps.teams.models import OrgUnit, Team


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


class UnitQuotaForm(QuotaNumbersForm):
    errors_on_fields = True


class UnitAdminForm(forms.Form):
    username = ActiveUserField()
