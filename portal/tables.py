"""List pages: sortable columns (django-tables2) over filters (django-filter), one way for every
list. A page builds its rows from a selector (which keeps team scoping), narrows them with a
`PageFilterSet`, and shows them as a `PortalTable`: a column header sorts (`?sort=`, again
for descending), `?page=` pages, and the filters' own query parameters stay in every link."""

import django_filters
import django_tables2 as tables
from django.template import Context
from django.template.loader import get_template
from django_tables2 import RequestConfig


class PortalTable(tables.Table):
    """A table in the portal's look, with the shared pager. `previous_label` / `next_label`
    name the pager's links (the audit log says "Newer" / "Older" while it reads by time)."""

    previous_label = "← Previous"
    next_label = "Next →"

    class Meta:
        template_name = "_table.html"


class CellColumn(tables.Column):
    """A cell drawn by one `part` of a template of cells (`record` is the row's object).

    Unlike django-tables2's TemplateColumn, the part renders inside the page's own context, so
    context processors run once per page, not once per cell, and `{% csrf_token %}` works."""

    def __init__(self, template_name: str, part: str, **kwargs):
        kwargs.setdefault("empty_values", ())
        super().__init__(**kwargs)
        self.template_name, self.part = template_name, part

    def render(self, record, table, value, **kwargs):
        template = get_template(self.template_name).template
        context = getattr(table, "context", None) or Context()
        with context.push(record=record, part=self.part, value=value):
            return template.render(context)


class PageFilterSet(django_filters.FilterSet):
    """Filters of a list page. A value that does not parse or is not offered (another team's
    slug, a status that does not exist) shows its message and matches no row: never a server
    error, and never every row as if the filter had been left empty."""

    @property
    def qs(self):
        if self.is_bound and not self.is_valid():
            return self.queryset.none()
        return super().qs

    def problems(self) -> list[str]:
        """The filters' errors as sentences naming the filter, for the page's alert."""
        form = self.form
        if not self.is_bound or form.is_valid():
            return []
        problems = []
        for name, errors in form.errors.items():
            label = form.fields[name].label if name in form.fields else ""
            for error in errors:
                problems.append(f"{label}: {error}" if label else str(error))
        return problems


def configure(request, table: PortalTable, *, per_page: int) -> PortalTable:
    """Sort and paginate `table` as the request asks. An unknown sort column is ignored and a
    page number out of range shows the nearest page, so no address gives a server error."""
    RequestConfig(request, paginate={"per_page": per_page}).configure(table)
    return table
