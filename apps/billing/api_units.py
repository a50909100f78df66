"""The chargeback by organisation unit (`units.unit_chargeback`) for finance, platform admins
and unit admins (their units' subtrees only)."""

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.billing.api import _period_from
from apps.billing.choices import is_showback
from apps.billing.units import chargeback_units_for, unit_chargeback
from portal.exceptions import PolicyRefusal


def unit_rows_as_json(rows: list[dict], *, showback: bool) -> list[dict]:
    """Money and hours as exact strings; costs left out in showback mode."""
    hidden = {"cost"} if showback else set()
    result = []
    for row in rows:
        item = {k: str(v) if k in ("cost", "gpu_hours") else v for k, v in row.items()}
        item["teams"] = [
            {k: str(v) if k != "team" else v for k, v in team.items() if k not in hidden}
            for team in row["teams"]
        ]
        result.append({k: v for k, v in item.items() if k not in hidden})
    return result


class UnitChargebackView(APIView):
    """A month's chargeback rolled up by organisation unit: each unit's total over every team
    below it (the sum of their rounded totals, so it reconciles to the cent) and its teams'
    rows. Finance and platform admins read every unit; unit admins the units they administer
    and those below; others are refused."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        parameters=[OpenApiParameter("period", str, description="Month, YYYY-MM.")],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        unit_ids = chargeback_units_for(request.user)
        if unit_ids is not None and not unit_ids:
            raise PolicyRefusal(
                "Only finance users, platform admins and unit admins may read the chargeback "
                "by unit."
            )
        period = _period_from(request)
        showback = is_showback()
        rows = unit_chargeback(period, unit_ids=unit_ids)
        return Response(
            {
                "period": f"{period.month:%Y-%m}",
                "draft": not period.is_closed,
                "currency": None if showback else settings.BILLING_CURRENCY,
                "units": unit_rows_as_json(rows, showback=showback),
            }
        )
