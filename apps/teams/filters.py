import django_filters

from apps.teams.models import Team


class TeamFilter(django_filters.FilterSet):
    is_active = django_filters.BooleanFilter()
    slug = django_filters.CharFilter(lookup_expr="icontains")
    unit = django_filters.CharFilter(field_name="unit__slug", help_text="Teams directly in it.")

    class Meta:
        model = Team
        fields = ["is_active", "slug", "unit"]
