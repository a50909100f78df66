from django import forms
from django.core.exceptions import ValidationError

from apps.fleet.models import GpuModel
from apps.teams.choices import TeamRole
from apps.teams.models import OrgUnit, Team, User
from apps.teams.services import quota_numbers_check
from portal.timezones import zone_names


class ActiveUserField(forms.CharField):
    """A username typed in; cleans to the active user of that name."""

    def __init__(self, **kwargs):
        super().__init__(max_length=150, label="Username", **kwargs)

    def clean(self, value) -> User:
        username = super().clean(value).strip()
        try:
            return User.objects.get(username=username, is_active=True)
        except User.DoesNotExist:
            raise forms.ValidationError(f"No active user named “{username}”.") from None


class MembershipAddForm(forms.Form):
    username = ActiveUserField()
    role = forms.ChoiceField(choices=TeamRole.choices, initial=TeamRole.MEMBER)


class MembershipRoleForm(forms.Form):
    role = forms.ChoiceField(choices=TeamRole.choices)


class QuotaNumbersForm(forms.Form):
    """A quota row's numbers (team or unit): GPU model or any model, guaranteed, limit. A limit
    below the guarantee is a form error, or on the fields where `errors_on_fields`."""

    errors_on_fields = False
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
                if not self.errors_on_fields:
                    self.add_error(None, invalid)
                for field, messages in (
                    invalid.message_dict.items() if self.errors_on_fields else ()
                ):
                    self.add_error(field, messages)
        return data


class QuotaForm(QuotaNumbersForm):
    field_order = ["team", "gpu_model", "guaranteed", "limit"]
    team = forms.ModelChoiceField(queryset=Team.objects.all(), to_field_name="slug")


class TeamCreateForm(forms.Form):
    """A new team and, optionally, its quota per GPU model (both numbers or neither)."""

    slug = forms.CharField(
        max_length=50,
        help_text="Short name in addresses and exports: lowercase letters, digits and hyphens.",
    )
    name = forms.CharField(max_length=200)
    cost_center = forms.CharField(max_length=64, required=False, label="Cost center")
    unit = forms.ModelChoiceField(
        queryset=OrgUnit.objects.none(),
        to_field_name="slug",
        label="Organisation unit",
        required=False,
        empty_label="the organisation (root)",
        help_text="Where the team sits in the organisation tree.",
    )

    def __init__(self, *args, units=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["unit"].queryset = units if units is not None else OrgUnit.objects.none()
        self.quota_rows = []
        for model in [*GpuModel.objects.order_by("name"), None]:
            key = model.pk if model else "any"
            label = model.name if model else "any model"
            for part in ("guaranteed", "limit"):
                self.fields[f"{part}_{key}"] = forms.IntegerField(
                    min_value=0,
                    max_value=1_000_000,
                    required=False,
                    label=f"{part.capitalize()} GPUs of {label}",
                )
            self.quota_rows.append((model, label, f"guaranteed_{key}", f"limit_{key}"))

    def quota_fields(self):
        """(label, guaranteed field, limit field) per row, for the template."""
        return [(label, self[g], self[lim]) for _, label, g, lim in self.quota_rows]

    def clean(self):
        data = super().clean()
        quotas = []
        for model, label, g_name, l_name in self.quota_rows:
            guaranteed, limit = data.get(g_name), data.get(l_name)
            if guaranteed is None and limit is None:
                continue
            if guaranteed is None or limit is None:
                missing = g_name if guaranteed is None else l_name
                if missing not in self.errors:
                    self.add_error(missing, f"Give both numbers for {label}, or neither.")
                continue
            try:
                quota_numbers_check(guaranteed=guaranteed, limit=limit)
            except ValidationError as invalid:
                for field, messages in invalid.message_dict.items():
                    self.add_error(g_name if field == "guaranteed" else l_name, messages)
                continue
            quotas.append((model, guaranteed, limit))
        data["quotas"] = quotas
        return data

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        return {
            "slug": data["slug"],
            "name": data["name"],
            "cost_center": data.get("cost_center", ""),
            "unit": data.get("unit"),
            "quotas": data["quotas"],
        }


class TimeZoneForm(forms.Form):
    time_zone = forms.ChoiceField(
        label="Time zone",
        help_text="Pages, forms and e-mails show and read times in this zone.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["time_zone"].choices = [(name, name) for name in zone_names()]
