import django_filters
from django import forms
from django.db.models import Q

from apps.audit.models import AuditEvent
from apps.audit.selectors import audit_filter_choices
from portal.tables import PageFilterSet


def _choices(values: list[str]) -> list[tuple[str, str]]:
    return [(value, value) for value in values]


class AuditDateRangeForm(forms.Form):
    def clean(self):
        cleaned = super().clean()
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and until < since:
            raise forms.ValidationError(
                f"The range ends ({until:%Y-%m-%d}) before it starts ({since:%Y-%m-%d})."
            )
        return cleaned


class AuditEventPageFilter(PageFilterSet):
    """The audit log page's filters: the menus offer what occurs in the log; `q` searches the
    object, actor, action and reason; `since` / `until` are whole days, both included."""

    q = django_filters.CharFilter(method="search", label="Search")
    action = django_filters.ChoiceFilter(empty_label="any")
    object_type = django_filters.ChoiceFilter(label="Object type", empty_label="any")
    actor = django_filters.ChoiceFilter(field_name="actor_name", empty_label="anyone")
    object_id = django_filters.CharFilter(widget=forms.HiddenInput)
    since = django_filters.DateFilter(
        field_name="created_at",
        lookup_expr="date__gte",
        label="From",
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    until = django_filters.DateFilter(
        field_name="created_at",
        lookup_expr="date__lte",
        label="To",
        widget=forms.DateInput(attrs={"type": "date"}),
    )

    class Meta:
        model = AuditEvent
        fields = ["q", "action", "object_type", "actor", "object_id", "since", "until"]
        form = AuditDateRangeForm

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        choices = audit_filter_choices()
        self.filters["action"].extra["choices"] = _choices(choices["actions"])
        self.filters["object_type"].extra["choices"] = _choices(choices["object_types"])
        self.filters["actor"].extra["choices"] = _choices(choices["actors"])

    def search(self, queryset, name, value):
        words = value.split()
        for word in words:
            queryset = queryset.filter(
                Q(object_repr__icontains=word)
                | Q(actor_name__icontains=word)
                | Q(action__icontains=word)
                | Q(reason__icontains=word)
                | Q(object_id=word)
            )
        return queryset
