import django_filters

from apps.jobs.choices import JobPriorityClass, JobStatus
from apps.jobs.models import Job


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
