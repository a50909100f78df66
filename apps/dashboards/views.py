"""Dashboard pages. Each draws the figures of apps.dashboards.figures (embedded as JSON) with
a filter form; the same data is at /api/v1/dashboards/..."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import get_object_or_404, render

from apps.dashboards import figures, selectors
from apps.dashboards.selectors import gpu as gpu_selectors
from apps.fleet.models import Gpu, GpuModel
from apps.fleet.selectors import fleet_summary
from apps.teams.models import OrgUnit, Team
from apps.teams.permissions import is_platform_admin
from apps.teams.selectors import user_memberships

PAGES = [
    ("utilization", "Utilization"),
    ("idle", "Idle GPUs"),
    ("occupancy", "Occupancy"),
    ("fleet", "Fleet health"),
]


def _render(request, page: str, build, *, extra=None):
    try:
        filters = selectors.parse_filters(request.GET, request.user, local=True)
    except selectors.TeamNotVisible as exc:
        raise Http404("No such team or unit.") from exc
    except selectors.FilterError as exc:
        messages.error(request, f"{exc} Showing the last 24 hours instead.")
        filters = selectors.parse_filters({}, request.user)
    data = build(filters)
    return render(
        request,
        f"dashboards/{page}.html",
        {
            **data,
            **(extra or {}),
            "page": page,
            "pages": PAGES,
            "filters": filters,
            "ranges": ["24h", "7d", "30d", "custom"],
            "all_teams": Team.objects.for_user(request.user).order_by("slug"),
            "all_units": OrgUnit.objects.for_user(request.user).order_by("name"),
            "gpu_models": GpuModel.objects.order_by("name"),
        },
    )


@login_required
def utilization_view(request):
    return _render(request, "utilization", figures.utilization)


@login_required
def idle_view(request):
    return _render(request, "idle", figures.idle)


@login_required
def occupancy_view(request):
    return _render(request, "occupancy", figures.occupancy)


@login_required
def fleet_view(request):
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins see fleet health.")
    return _render(request, "fleet", figures.fleet)


@login_required
def home_view(request):
    return render(
        request,
        "dashboards/home.html",
        {
            "memberships": user_memberships(user=request.user),
            "fleet": fleet_summary(),
            "summary": selectors.home_summary(request.user),
        },
    )


@login_required
def gpu_view(request, pk: int):
    """One GPU: its activity over the last 24 h or 7 d, who held it, its health events."""
    gpu = get_object_or_404(Gpu.objects.select_related("node", "model"), pk=pk)
    range_name = request.GET.get("range", "24h")
    try:
        start, end = gpu_selectors.gpu_window(range_name)
    except gpu_selectors.GpuRangeError as error:
        messages.error(request, f"{error} Showing the last 24 hours instead.")
        range_name = "24h"
        start, end = gpu_selectors.gpu_window(range_name)
    activity = gpu_selectors.gpu_activity(gpu, range_name, now=end)
    return render(
        request,
        "dashboards/gpu.html",
        {
            "gpu": gpu,
            "range": range_name,
            "ranges": list(gpu_selectors.GPU_RANGES),
            "start": start,
            "end": end,
            "has_activity": bool(activity["rows"]),
            "figures": {"gpu-activity": figures.gpu_activity(activity)},
            "holders": gpu_selectors.gpu_holders(gpu, user=request.user, start=start, end=end),
            "events": gpu_selectors.gpu_health_events(gpu, start=start, end=end),
        },
    )
