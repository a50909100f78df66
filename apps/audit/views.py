from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render

from apps.audit.filters import AuditEventPageFilter
from apps.audit.selectors import audit_event_list
from apps.audit.tables import AuditEventTable
from portal.roles import is_platform_admin
from portal.tables import configure


@login_required
def audit_event_list_view(request):
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins can read the audit log.")
    filters = AuditEventPageFilter(request.GET or None, queryset=audit_event_list())
    table = AuditEventTable(filters.qs)
    configure(request, table, per_page=50)
    if not table.order_by:
        # Newest first until a column is sorted: the pager then reads through time.
        table.previous_label, table.next_label = "← Newer", "Older →"
    return render(
        request,
        "audit/auditevent_list.html",
        {"table": table, "filters": filters, "problems": filters.problems()},
    )
