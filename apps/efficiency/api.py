from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.efficiency import advice
from apps.efficiency.forms import AdviceFilterForm
from apps.efficiency.serializers import item_payload, total_payload
from portal.pagination import PagePagination

FILTER_PARAMETERS = [
    OpenApiParameter(
        "since",
        OpenApiTypes.DATE,
        description=(
            "First day, in the requester's time zone (UTC for API tokens); default: 30 days ago."
        ),
    ),
    OpenApiParameter(
        "until",
        OpenApiTypes.DATE,
        description=(
            "Last day, included, in the requester's time zone (UTC for API tokens); default: now."
        ),
    ),
    OpenApiParameter("team", str, description="Team slug."),
    OpenApiParameter("user", str, description="Username of who submitted or booked."),
    OpenApiParameter("kind", str, enum=["job", "booking"]),
    OpenApiParameter("finding", str, enum=list(advice.FindingKind.LABELS)),
    OpenApiParameter("page", int),
    OpenApiParameter("page_size", int),
]


class AdviceView(APIView):
    """Right-sizing advice: jobs and bookings of the window that held GPUs they did not use,
    never needed half the GPU memory, or were released for idleness (no-shows included), each
    with the suggested request and the money it would have saved at the rate cards; totals per
    team and per user. Team admins see their teams, platform admins and finance all, members
    their own jobs and bookings."""

    @extend_schema(
        summary="Right-sizing advice",
        parameters=FILTER_PARAMETERS,
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        form = AdviceFilterForm(request.query_params)
        if not form.is_valid():
            raise serializers.ValidationError(form.errors.get_json_data(escape_html=True))
        filters = form.filters(user=request.user)
        items = advice.right_sizing(user=request.user, filters=filters)
        paginator = PagePagination()
        page = paginator.paginate_queryset(items, request, view=self)
        return Response(
            {
                "window": {"start": filters.start, "end": filters.end},
                "saving": str(sum((i.saving for i in items), advice.Decimal(0))),
                "teams": [total_payload(r) for r in advice.totals(items, by="team")],
                "users": [total_payload(r) for r in advice.totals(items, by="user")],
                "count": paginator.page.paginator.count,
                "next": paginator.get_next_link(),
                "previous": paginator.get_previous_link(),
                "results": [item_payload(i) for i in page],
            }
        )
