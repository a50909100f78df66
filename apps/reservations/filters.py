import django_filters

from apps.reservations.choices import ReservationStatus
from apps.reservations.models import Reservation


class ReservationFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")
    status = django_filters.MultipleChoiceFilter(choices=ReservationStatus.choices)
    starts_after = django_filters.IsoDateTimeFilter(field_name="start", lookup_expr="gte")
    starts_before = django_filters.IsoDateTimeFilter(field_name="start", lookup_expr="lt")
    ends_after = django_filters.IsoDateTimeFilter(field_name="end", lookup_expr="gt")
    mine = django_filters.BooleanFilter(method="filter_mine", label="Only my bookings")
    over_quota = django_filters.BooleanFilter()

    class Meta:
        model = Reservation
        fields = ["team", "gpu_model", "status", "over_quota"]

    def filter_mine(self, queryset, name, value):
        if value:
            return queryset.filter(created_by=self.request.user)
        return queryset
