from datetime import UTC

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.fleet import selectors, services
from apps.fleet.models import Gpu, MaintenanceWindow, Node
from apps.teams.permissions import is_platform_admin
from portal.exceptions import ApplicationError

OPERATIONS = {"drain", "undrain", "retire"}


@login_required
def fleet_view(request):
    return render(
        request,
        "fleet/fleet.html",
        {"nodes": selectors.fleet_overview(), "summary": selectors.fleet_summary()},
    )


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
    """Tell the admin which bookings the change moved and which lost GPUs."""
    for moved in relocation["moved"]:
        messages.info(
            request,
            f"Reservation #{moved['reservation']} ({moved['team']}) moved from "
            f"{moved['gpu']} to {moved['moved_to']}.",
        )
    for lost in relocation["unresolved"]:
        messages.warning(
            request,
            f"Reservation #{lost['reservation']} ({lost['team']}) lost {lost['gpu']}: "
            "no free GPU of its model; the team was told.",
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


class MaintenanceForm(forms.Form):
    start = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    end = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    reason = forms.CharField(max_length=500)


@login_required
@require_POST
def maintenance_schedule_view(request, pk: int):
    """Times are UTC (the form says so); the API takes any zone."""
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins plan maintenance.")
    node = get_object_or_404(Node, pk=pk)
    form = MaintenanceForm(request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            messages.error(request, f"{field}: {' '.join(errors)}")
        return redirect("fleet:fleet")
    utc = {k: form.cleaned_data[k].replace(tzinfo=UTC) for k in ("start", "end")}
    try:
        _window, relocation = services.maintenance_schedule(
            node=node, reason=form.cleaned_data["reason"], actor=request.user, **utc
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
