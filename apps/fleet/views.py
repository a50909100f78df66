from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.views.decorators.http import require_POST
from django_tables2 import RequestConfig

from apps.fleet import selectors, services
from apps.fleet.filters import FleetPageFilter
from apps.fleet.models import Gpu, MaintenanceWindow, Node
from apps.fleet.tables import GpuTable
from apps.fleet.transitions import POWER_REQUESTS
from portal.exceptions import ApplicationError
from portal.roles import is_platform_admin
from portal.timezones import ZonedDateTimeField

OPERATIONS = {"drain", "undrain", "retire"}


@login_required
def fleet_view(request):
    """Every node with its GPUs. Filters narrow the GPUs shown (a node shows while one of its
    GPUs matches; its counts stay those of the whole node) and a header click sorts them."""
    nodes = selectors.fleet_overview()
    filters = FleetPageFilter(
        request.GET.copy() if _filters_asked(request.GET) else None,
        queryset=Gpu.objects.filter(mig_parent__isnull=True),
    )
    if filters.is_bound:
        shown = set(filters.qs.values_list("pk", flat=True))
        for node in nodes:
            node.physical_gpus = [gpu for gpu in node.physical_gpus if gpu.pk in shown]
        nodes = [node for node in nodes if node.physical_gpus]
    exclude = () if is_platform_admin(request.user) else ("actions",)
    for node in nodes:
        node.gpu_table = GpuTable(node.physical_gpus, exclude=exclude)
        RequestConfig(request, paginate=False).configure(node.gpu_table)
    return render(
        request,
        "fleet/fleet.html",
        {
            "nodes": nodes,
            "summary": selectors.fleet_summary(),
            "filters": filters,
            "problems": filters.problems(),
        },
    )


def _filters_asked(query) -> bool:
    return any(key != "sort" and value for key, value in query.items())


def _change_state(request, change, target: str, obj, operation: str):
    """Run a fleet state service (`change(<target>=obj, ...)`) for a page form."""
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins may drain, undrain or retire.")
    if operation not in OPERATIONS:
        raise PermissionDenied("Unknown operation.")
    reason = request.POST.get("reason", "").strip()
    try:
        result = change(**{target: obj}, operation=operation, actor=request.user, reason=reason)
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"{obj}: {operation} done.")
        _report_relocation(request, result.relocation)
    return redirect("fleet:fleet")


def _report_relocation(request, relocation: dict) -> None:
    """Tell the admin, in one message each, which bookings the change moved and which lost
    GPUs (a drained node can move dozens; one banner per GPU would bury the page)."""
    if relocation["moved"]:
        messages.info(request, _relocation_summary(relocation["moved"], "moved to other GPUs"))
    if relocation["unresolved"]:
        messages.warning(
            request,
            _relocation_summary(
                relocation["unresolved"],
                "could not move (no free GPU of their model); their teams were told",
            ),
        )


def _relocation_summary(entries: list[dict], outcome: str) -> str:
    by_reservation: dict[int, dict] = {}
    for entry in entries:
        item = by_reservation.setdefault(
            entry["reservation"], {"team": entry["team"], "gpus": 0, "nodes": set()}
        )
        item["gpus"] += 1
        if "moved_to" in entry:
            item["nodes"].add(entry["moved_to"].split("/", 1)[0])
    gpus = len(entries)
    reservations = len(by_reservation)
    details = "; ".join(
        f"#{pk} ({item['team']}, {item['gpus']} GPU{pluralize(item['gpus'])}"
        + (f" to {', '.join(sorted(item['nodes']))}" if item["nodes"] else "")
        + ")"
        for pk, item in sorted(by_reservation.items())
    )
    return (
        f"{gpus} booked GPU{pluralize(gpus)} of {reservations} "
        f"reservation{pluralize(reservations)} {outcome}: {details}."
    )


@login_required
@require_POST
def node_change_state_view(request, pk: int, operation: str):
    return _change_state(
        request, services.node_change_state, "node", get_object_or_404(Node, pk=pk), operation
    )


@login_required
@require_POST
def gpu_change_state_view(request, pk: int, operation: str):
    gpu = get_object_or_404(Gpu.objects.select_related("node"), pk=pk)
    return _change_state(request, services.gpu_change_state, "gpu", gpu, operation)


@login_required
@require_POST
def node_power_view(request, pk: int, operation: str):
    """A platform admin powers a node off or on (the page asks to confirm first)."""
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins may power nodes off or on.")
    if operation not in POWER_REQUESTS:
        raise Http404("Unknown power operation.")
    node = get_object_or_404(Node, pk=pk)
    try:
        services.node_power_request(
            node=node,
            operation=operation,
            actor=request.user,
            reason=request.POST.get("reason", "").strip() or "admin request",
        )
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"{node}: {operation.replace('_', ' ')} requested.")
    return redirect("fleet:fleet")


class MaintenanceForm(forms.Form):
    start = ZonedDateTimeField()
    end = ZonedDateTimeField()
    reason = forms.CharField(max_length=500)


@login_required
@require_POST
def maintenance_schedule_view(request, pk: int):
    """Times are typed in the reader's zone (the form names it); the API takes any zone."""
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins plan maintenance.")
    node = get_object_or_404(Node, pk=pk)
    form = MaintenanceForm(request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            messages.error(request, f"{field}: {' '.join(errors)}")
        return redirect("fleet:fleet")
    try:
        _window, relocation = services.maintenance_schedule(
            node=node,
            reason=form.cleaned_data["reason"],
            actor=request.user,
            start=form.cleaned_data["start"],
            end=form.cleaned_data["end"],
        )
    except ValidationError as error:
        for message in error.messages:
            messages.error(request, message)
        return redirect("fleet:fleet")
    messages.success(request, f"Maintenance of {node.hostname} planned.")
    _report_relocation(request, relocation)
    return redirect("fleet:fleet")


@login_required
@require_POST
def maintenance_cancel_view(request, pk: int):
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins cancel maintenance.")
    window = get_object_or_404(MaintenanceWindow, pk=pk)
    services.maintenance_cancel(window=window, actor=request.user)
    messages.success(request, f"Maintenance of {window.node.hostname} cancelled.")
    return redirect("fleet:fleet")
