from django import forms

from apps.billing.choices import Enforcement
from apps.fleet.models import GpuModel
from apps.teams.models import OrgUnit, Team
from portal.timezones import ZonedDateTimeField


class RateCardForm(forms.Form):
    gpu_model = forms.ModelChoiceField(
        GpuModel.objects.all(), to_field_name="name", label="GPU model"
    )
    price_per_gpu_hour = forms.DecimalField(
        min_value=0, max_digits=12, decimal_places=4, label="Price per GPU-hour"
    )
    currency = forms.RegexField(r"^[A-Za-z]{3}$", required=False, max_length=3)
    effective_from = ZonedDateTimeField()
    effective_to = ZonedDateTimeField(required=False)
    over_quota_multiplier = forms.DecimalField(
        min_value=0, max_digits=6, decimal_places=3, initial=1
    )
    energy_price_per_kwh = forms.DecimalField(
        min_value=0, max_digits=10, decimal_places=5, required=False, label="Energy price per kWh"
    )


class RateCardEndForm(forms.Form):
    effective_to = ZonedDateTimeField()


class BudgetForm(forms.Form):
    team = forms.ModelChoiceField(
        Team.objects.filter(is_active=True), to_field_name="slug", required=False
    )
    unit = forms.ModelChoiceField(
        OrgUnit.objects.all(),
        to_field_name="slug",
        required=False,
        help_text="Instead of a team: the unit's budget covers every team below it.",
    )
    amount = forms.DecimalField(min_value=0, max_digits=14, decimal_places=2)
    enforcement = forms.ChoiceField(choices=Enforcement.choices)

    def clean(self):
        data = super().clean()
        if bool(data.get("team")) == bool(data.get("unit")):
            raise forms.ValidationError("Choose either a team or a unit.")
        return data


class AdjustmentForm(forms.Form):
    team = forms.ModelChoiceField(Team.objects.filter(is_active=True), to_field_name="slug")
    amount = forms.DecimalField(max_digits=14, decimal_places=2, help_text="Negative: a credit.")
    reason = forms.CharField(max_length=2000)
    corrects_period = forms.RegexField(
        r"^\d{4}-\d{2}$",
        required=False,
        help_text="YYYY-MM: the month this adjustment corrects (default: the month shown).",
        error_messages={"invalid": "Give the month it corrects as YYYY-MM, e.g. 2026-10."},
    )
