from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.fleet import selectors, services
from apps.fleet.models import Gpu, Node
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


def _change_state(request, change, obj, operation: str):
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins may drain, undrain or retire.")
    if operation not in OPERATIONS:
        raise PermissionDenied("Unknown operation.")
    try:
        result = change(obj, operation, request.user, request.POST.get("reason", "").strip())
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"{obj}: {operation} done.")
        for moved in result.relocation["moved"]:
            messages.info(
                request,
                f"Reservation #{moved['reservation']} ({moved['team']}) moved from "
                f"{moved['gpu']} to {moved['moved_to']}.",
            )
        for lost in result.relocation["unresolved"]:
            messages.warning(
                request,
                f"Reservation #{lost['reservation']} ({lost['team']}) lost {lost['gpu']}: "
                "no free GPU of its model; the team was told.",
            )
    return redirect("fleet:fleet")


@login_required
@require_POST
def node_change_state_view(request, pk: int, operation: str):
    return _change_state(
        request,
        lambda obj, op, actor, reason: services.node_change_state(
            node=obj, operation=op, actor=actor, reason=reason
        ),
        get_object_or_404(Node, pk=pk),
        operation,
    )


@login_required
@require_POST
def gpu_change_state_view(request, pk: int, operation: str):
    return _change_state(
        request,
        lambda obj, op, actor, reason: services.gpu_change_state(
            gpu=obj, operation=op, actor=actor, reason=reason
        ),
        get_object_or_404(Gpu.objects.select_related("node"), pk=pk),
        operation,
    )
