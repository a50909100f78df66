from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import render

from apps.audit.selectors import audit_event_list, audit_filter_choices, field_changes
from portal.roles import is_platform_admin


@login_required
def audit_event_list_view(request):
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins can read the audit log.")
    filters = {
        key: request.GET.get(key, "").strip()
        for key in ("action", "object_type", "actor", "object_id")
    }
    page = Paginator(audit_event_list(**filters), 50).get_page(request.GET.get("page"))
    for event in page:
        event.changes = field_changes(event.before, event.after)
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "audit/auditevent_list.html",
        {
            "page": page,
            "filters": filters,
            "choices": audit_filter_choices(),
            "query": query.urlencode(),
        },
    )
