import django_tables2 as tables
from django.template.loader import render_to_string

from apps.audit.models import AuditEvent
from apps.audit.selectors import field_changes
from portal.formatting import when
from portal.tables import PortalTable


class AuditEventTable(PortalTable):
    created_at = tables.Column("Time", order_by=("created_at", "id"))
    actor_name = tables.Column("Actor")
    action = tables.TemplateColumn("<code>{{ value }}</code>", verbose_name="Action")
    object_repr = tables.Column("Object")
    changes = tables.Column("Changes", accessor="pk", orderable=False)
    reason = tables.Column("Reason", orderable=False, default="")

    class Meta(PortalTable.Meta):
        model = AuditEvent
        fields = ("created_at", "actor_name", "action", "object_repr", "changes", "reason")
        attrs = {"data-testid": "audit-table"}
        row_attrs = {"data-event": lambda record: record.pk}
        empty_text = "No audit events match."

    def render_created_at(self, value):
        return when(value)

    def render_changes(self, record):
        return render_to_string(
            "audit/_changes.html", {"changes": field_changes(record.before, record.after)}
        )
