import django_filters
from django import forms
from django.db.models import Q

from apps.fleet.models import GpuModel
from apps.jobs.choices import JobPriorityClass, JobStatus
from apps.jobs.models import Job
from apps.teams.models import Team
from portal.tables import PageFilterSet


class JobFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    status = django_filters.MultipleChoiceFilter(choices=JobStatus.choices)
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")
    submitted_by = django_filters.CharFilter(field_name="submitted_by__username")
    priority_class = django_filters.ChoiceFilter(choices=JobPriorityClass.choices)
    mine = django_filters.BooleanFilter(method="filter_mine", label="Only my jobs")

    class Meta:
        model = Job
        fields = ["team", "status", "gpu_model", "submitted_by", "priority_class"]

    def filter_mine(self, queryset, name, value):
        if value:
            return queryset.filter(submitted_by=self.request.user)
        return queryset


class JobPageFilter(PageFilterSet):
    """The jobs page's filters (same query parameters as before: team, status, gpu_model,
    mine), plus `q`, a search of the job's name and command. Only the user's teams are
    offered: another team's slug is refused with a message, not shown."""

    q = django_filters.CharFilter(method="search", label="Search")
    team = django_filters.ModelChoiceFilter(
        queryset=Team.objects.none(), to_field_name="slug", empty_label="All teams"
    )
    status = django_filters.ChoiceFilter(choices=JobStatus.choices, empty_label="Any status")
    gpu_model = django_filters.ModelChoiceFilter(
        queryset=GpuModel.objects.all(),
        to_field_name="name",
        empty_label="Any model",
        label="GPU model",
    )
    mine = django_filters.BooleanFilter(
        method="filter_mine", label="Only my jobs", widget=forms.CheckboxInput
    )

    class Meta:
        model = Job
        fields = ["q", "team", "status", "gpu_model", "mine"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.filters["team"].queryset = Team.objects.for_user(self.request.user).order_by("slug")

    def search(self, queryset, name, value):
        for word in value.split():
            queryset = queryset.filter(Q(name__icontains=word) | Q(argv__icontains=word))
        return queryset

    def filter_mine(self, queryset, name, value):
        if value:
            return queryset.filter(submitted_by=self.request.user)
        return queryset
