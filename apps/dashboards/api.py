"""JSON endpoints of the dashboards: the same figures the pages draw, as plotly JSON.

Query parameters: range (24h, 7d, 30d, custom with start/end), unit (slug: teams below it),
team (slug), group (team, or unit: summed per child unit), gpu_model (name). A bad parameter
is 400 (code bad_filter) with the reason; a team or unit the user cannot see is 404.
"""

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.dashboards import figures, selectors
from apps.teams.permissions import is_platform_admin

FILTER_PARAMETERS = [
    OpenApiParameter("range", str, enum=["24h", "7d", "30d", "custom"]),
    OpenApiParameter("start", OpenApiTypes.DATETIME, description="With range=custom."),
    OpenApiParameter("end", OpenApiTypes.DATETIME, description="With range=custom; default now."),
    OpenApiParameter(
        "unit", str, description="Organisation unit slug: the teams anywhere below it."
    ),
    OpenApiParameter("team", str, description="Team slug."),
    OpenApiParameter(
        "group",
        str,
        enum=["team", "unit"],
        description="unit: figures summed per child unit of `unit` (default the root).",
    ),
    OpenApiParameter("gpu_model", str, description="GPU model name."),
]


def filters_from(request) -> selectors.Filters:
    try:
        return selectors.parse_filters(request.query_params, request.user)
    except selectors.TeamNotVisible as exc:
        raise Http404("No such team.") from exc


class DashboardView(APIView):
    build = None  # figures.<function>

    def payload(self, filters, data) -> dict:
        return {"figures": data["figures"]}

    def get(self, request):
        filters = filters_from(request)
        data = type(self).build(filters)
        return Response({"filters": filters.as_dict(), **self.payload(filters, data)})


@extend_schema(parameters=FILTER_PARAMETERS, responses=OpenApiTypes.OBJECT)
class UtilizationView(DashboardView):
    """Allocated vs busy GPUs over time by team; utilization % per team and GPU model."""

    build = figures.utilization

    def payload(self, filters, data):
        return {
            "figures": data["figures"],
            "has_data": data["has_data"],
            "step_seconds": data["step_seconds"],
        }


@extend_schema(parameters=FILTER_PARAMETERS, responses=OpenApiTypes.OBJECT)
class IdleView(DashboardView):
    """GPU states now, idle GPU-hours by kind and team (with list-price cost where priced)."""

    build = figures.idle

    def payload(self, filters, data):
        return {
            "figures": data["figures"],
            "state_counts": data["state_counts"],
            "signal_counts": data["signal_counts"],
            "by_kind": [
                {**row, "cost": str(row["cost"]) if row["cost"] is not None else None}
                for row in data["by_kind"]
            ],
            "reclaimed": [
                {
                    "id": r.pk,
                    "team": r.team.slug,
                    "count": r.count,
                    "released_at": r.ended_at.isoformat(),
                    "released_gpu_hours": str(r.released_gpu_hours),
                }
                for r in data["reclaimed"]
            ],
        }


@extend_schema(parameters=FILTER_PARAMETERS, responses=OpenApiTypes.OBJECT)
class OccupancyView(DashboardView):
    """Bookings and jobs per GPU over the window (a Gantt chart)."""

    build = figures.occupancy

    def payload(self, filters, data):
        return {"figures": data["figures"], "count": data["count"]}


@extend_schema(parameters=FILTER_PARAMETERS, responses=OpenApiTypes.OBJECT)
class FleetHealthView(DashboardView):
    """Platform admins: nodes by status, GPUs by health, latest temperature and power."""

    build = figures.fleet

    def get(self, request):
        if not is_platform_admin(request.user):
            raise PermissionDenied("Only platform admins see fleet health.")
        return super().get(request)

    def payload(self, filters, data):
        return {
            "figures": data["figures"],
            "nodes": data["nodes"],
            "health": data["health"],
            "unreported": data["unreported"],
        }


@extend_schema(parameters=FILTER_PARAMETERS, responses=OpenApiTypes.OBJECT)
class QuotaPressureView(DashboardView):
    """Held GPUs and queued jobs' demand against each quota, for the teams the user sees."""

    build = figures.quota_pressure

    def payload(self, filters, data):
        return {"figures": data["figures"], "rows": data["rows"]}
