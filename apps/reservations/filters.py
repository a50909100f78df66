from datetime import UTC

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django_filters.fields import IsoDateTimeField

from apps.fleet.models import GpuModel
from apps.reservations.choices import ReservationStatus
from apps.reservations.models import Reservation
from apps.teams.models import Team
from portal.tables import PageFilterSet


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, converted to UTC. Python accepts offsets up to 24 h, PostgreSQL only
    up to 15:59, so an offset like -19:25 passed through as-is failed in the database (500)."""

    def to_python(self, value):
        value = super().to_python(value)
        if value is None or value.tzinfo is None:
            return value
        try:
            return value.astimezone(UTC)
        except OverflowError as error:
            raise ValidationError("The time is out of range.", code="overflow") from error


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class ReservationFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")
    status = django_filters.MultipleChoiceFilter(choices=ReservationStatus.choices)
    starts_after = UtcIsoDateTimeFilter(field_name="start", lookup_expr="gte")
    starts_before = UtcIsoDateTimeFilter(field_name="start", lookup_expr="lt")
    ends_after = UtcIsoDateTimeFilter(field_name="end", lookup_expr="gt")
    mine = django_filters.BooleanFilter(method="filter_mine", label="Only my bookings")
    over_quota = django_filters.BooleanFilter()

    class Meta:
        model = Reservation
        fields = ["team", "gpu_model", "status", "over_quota"]

    def filter_mine(self, queryset, name, value):
        if value:
            return queryset.filter(created_by=self.request.user)
        return queryset


class ReservationPageFilter(PageFilterSet):
    """The reservations page's filters within its tab (upcoming, active, past): team, GPU
    model, only the user's own bookings, and `q`, a search of the purpose. Only the user's
    teams are offered: another team's slug is refused with a message, not shown."""

    q = django_filters.CharFilter(method="search", label="Search")
    team = django_filters.ModelChoiceFilter(
        queryset=Team.objects.none(), to_field_name="slug", empty_label="All teams"
    )
    gpu_model = django_filters.ModelChoiceFilter(
        queryset=GpuModel.objects.all(),
        to_field_name="name",
        empty_label="Any model",
        label="GPU model",
    )
    mine = django_filters.BooleanFilter(
        method="filter_mine", label="Only my bookings", widget=forms.CheckboxInput
    )

    class Meta:
        model = Reservation
        fields = ["q", "team", "gpu_model", "mine"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.filters["team"].queryset = Team.objects.for_user(self.request.user).order_by("slug")

    def search(self, queryset, name, value):
        for word in value.split():
            queryset = queryset.filter(purpose__icontains=word)
        return queryset

    def filter_mine(self, queryset, name, value):
        if value:
            return queryset.filter(created_by=self.request.user)
        return queryset
