import django_filters

from apps.teams.models import Team


class TeamFilter(django_filters.FilterSet):
    is_active = django_filters.BooleanFilter()
    slug = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Team
        fields = ["is_active", "slug"]
