import json

from django import forms

from apps.fleet.models import GpuModel
from apps.jobs.choices import JobPriorityClass
from apps.reservations.choices import OPEN_STATUSES
from apps.reservations.models import Reservation
from apps.teams.models import Quota, Team


def parse_argv(text: str) -> list[str]:
    """A JSON list, or one argument per line (blank lines skipped). Never split by a shell."""
    text = text.strip()
    if text.startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise forms.ValidationError(f"Not a valid JSON list: {error.msg}.") from error
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            raise forms.ValidationError("The JSON list must contain only strings.")
        return value
    return [line.strip() for line in text.splitlines() if line.strip()]


def parse_env(text: str) -> dict[str, str]:
    env = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if "=" not in line:
            raise forms.ValidationError(f"Line {number}: write NAME=value.")
        name, value = line.split("=", 1)
        env[name.strip()] = value
    return env


class JobForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    name = forms.CharField(max_length=200, required=False)
    argv = forms.CharField(
        label="Command",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text='One argument per line, or a JSON list such as ["python", "train.py"].',
    )
    workdir = forms.CharField(max_length=1024, required=False, label="Working directory")
    env = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text="NAME=value, one per line.",
    )
    gpu_model = forms.ModelChoiceField(
        queryset=GpuModel.objects.all(),
        to_field_name="name",
        required=False,
        empty_label="Any model",
        label="GPU model",
    )
    gpu_count = forms.IntegerField(min_value=1, max_value=100_000, initial=1, label="GPUs")
    same_node = forms.BooleanField(required=False, initial=True, label="All GPUs on one node")
    max_runtime_minutes = forms.IntegerField(
        min_value=1, max_value=10**7, initial=60, label="Maximum runtime (minutes)"
    )
    priority_class = forms.ChoiceField(
        choices=JobPriorityClass.choices, initial=JobPriorityClass.OVER_QUOTA
    )
    reservation = forms.ModelChoiceField(
        queryset=Reservation.objects.none(),
        required=False,
        empty_label="None (shared pool)",
        label="Run inside reservation",
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        teams = Team.objects.member_of(user)
        self.fields["team"].queryset = teams
        self.fields["team"].to_field_name = "slug"
        self.fields["reservation"].queryset = Reservation.objects.filter(
            team__in=teams, status__in=OPEN_STATUSES
        ).select_related("team", "gpu_model")
        if not self.is_bound:
            self._default_priority(teams)

    def _default_priority(self, teams) -> None:
        """Default to the guaranteed class when the team the form starts with has a guarantee
        (jobs within it are never preempted); teams without one get over-quota."""
        team = teams.filter(slug=self.initial.get("team")).first() or teams.order_by("slug").first()
        if team is None:
            return
        self.initial.setdefault("team", team.slug)
        guaranteed = Quota.objects.filter(team=team, guaranteed__gt=0).exists()
        self.initial.setdefault(
            "priority_class",
            JobPriorityClass.GUARANTEED if guaranteed else JobPriorityClass.OVER_QUOTA,
        )

    def clean_argv(self):
        return parse_argv(self.cleaned_data["argv"])

    def clean_env(self):
        return parse_env(self.cleaned_data.get("env") or "")

    def service_kwargs(self) -> dict:
        data = dict(self.cleaned_data)
        data["max_runtime_seconds"] = data.pop("max_runtime_minutes") * 60
        return data
