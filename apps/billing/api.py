from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.billing import exports, focus, pricing, selectors, services
from apps.billing.choices import ExportFormat, is_showback
from apps.billing.models import (
    Adjustment,
    BillingPeriod,
    LedgerEntry,
    RateCard,
)
from apps.billing.periods import parse_period
from apps.billing.services import is_billing_admin
from apps.fleet.models import GpuModel
from apps.teams.models import Team
from apps.teams.selectors import TeamNotVisible, unit_scope
from portal.downloads import streaming_download
from portal.exceptions import ApplicationError
from portal.serializers import RefuseUnknownFieldsMixin


class RateCardSerializer(RefuseUnknownFieldsMixin, serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    price_per_gpu_hour = serializers.DecimalField(max_digits=12, decimal_places=4, min_value=0)
    over_quota_multiplier = serializers.DecimalField(
        max_digits=6, decimal_places=3, min_value=0, required=False
    )
    energy_price_per_kwh = serializers.DecimalField(
        max_digits=10, decimal_places=5, min_value=0, required=False, allow_null=True
    )
    currency = serializers.RegexField(r"^[A-Za-z]{3}$", required=False)

    class Meta:
        model = RateCard
        fields = [
            "id", "gpu_model", "price_per_gpu_hour", "currency", "effective_from", "effective_to",
            "over_quota_multiplier", "energy_price_per_kwh", "created_at",
        ]  # fmt: skip
        read_only_fields = ["id", "created_at"]


class BillingAdminWrites(IsAuthenticated):
    """Anyone signed in reads; finance and platform admins write."""

    message = "Only finance users and platform admins may change billing data."

    def has_permission(self, request, view) -> bool:
        if not super().has_permission(request, view):
            return False
        return request.method in ("GET", "HEAD", "OPTIONS") or is_billing_admin(request.user)


class BillingAdminOnly(IsAuthenticated):
    message = "Only finance users and platform admins may see this."

    def has_permission(self, request, view) -> bool:
        return super().has_permission(request, view) and is_billing_admin(request.user)


class RateCardViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Prices per GPU model over time. Everyone reads; finance and platform admins add or end
    them. Time already charged keeps its price, so changes only take effect after it."""

    serializer_class = RateCardSerializer
    permission_classes = [BillingAdminWrites]
    filterset_fields = ["gpu_model__name", "currency"]
    queryset = RateCard.objects.select_related("gpu_model").order_by(
        "gpu_model__name", "effective_from"
    )

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        serializer.instance = services.rate_card_create(
            actor=self.request.user, gpu_model=data.pop("gpu_model"), **data
        )

    def perform_update(self, serializer):
        data = dict(serializer.validated_data)
        if data.pop("gpu_model", serializer.instance.gpu_model) != serializer.instance.gpu_model:
            raise serializers.ValidationError({"gpu_model": "A rate card's model cannot change."})
        serializer.instance = services.rate_card_update(
            actor=self.request.user, card=serializer.instance, **data
        )


class BillingPeriodSerializer(serializers.ModelSerializer):
    period = serializers.SerializerMethodField()
    closed_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = BillingPeriod
        fields = ["id", "period", "month", "status", "closed_at", "closed_by", "metered_until"]

    def get_period(self, obj) -> str:
        return f"{obj.month:%Y-%m}"


class BillingPeriodViewSet(viewsets.ReadOnlyModelViewSet):
    """Monthly billing periods (finance and platform admins). `close` is final."""

    serializer_class = BillingPeriodSerializer
    permission_classes = [BillingAdminOnly]
    queryset = BillingPeriod.objects.select_related("closed_by")
    filterset_fields = ["status"]

    @extend_schema(request=None, responses=BillingPeriodSerializer)
    @action(detail=True, methods=["post"])
    def close(self, request, pk=None):
        period = services.period_close(actor=request.user, period=self.get_object())
        return Response(BillingPeriodSerializer(period).data)


class AdjustmentSerializer(RefuseUnknownFieldsMixin, serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    period = serializers.SlugRelatedField(
        slug_field="month",
        read_only=True,
        help_text="Read-only: the open month the adjustment is booked in (sending it is a 400).",
    )
    amount = serializers.DecimalField(max_digits=14, decimal_places=2)
    corrects_entry = serializers.PrimaryKeyRelatedField(
        queryset=LedgerEntry.objects.all(), required=False, allow_null=True
    )
    corrects_period = serializers.RegexField(
        r"^\d{4}-\d{2}$", required=False, write_only=True, help_text="YYYY-MM it corrects."
    )
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Adjustment
        fields = [
            "id", "team", "period", "amount", "reason", "corrects_entry", "corrects_period",
            "created_by", "created_at",
        ]  # fmt: skip
        read_only_fields = ["id", "period", "created_by", "created_at"]
        read_only_hints = {
            "period": (
                "An adjustment is always booked in the current (open) month; to correct a "
                "closed month, name it in corrects_period."
            )
        }


class AdjustmentViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Corrections, booked in the current (open) period; finance and platform admins."""

    serializer_class = AdjustmentSerializer
    permission_classes = [BillingAdminOnly]
    queryset = Adjustment.objects.select_related("team", "period", "created_by")
    filterset_fields = ["team__slug"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        corrects_period = None
        if data.get("corrects_period"):
            month = parse_period(data["corrects_period"], now=timezone.now())
            corrects_period = get_object_or_404(BillingPeriod, month=month)
        serializer.instance = services.adjustment_create(
            actor=self.request.user,
            team=data["team"],
            amount=data["amount"],
            reason=data.get("reason", ""),
            corrects_entry=data.get("corrects_entry"),
            corrects_period=corrects_period,
        )


def decimals_as_strings(values: dict) -> dict:
    """Money and quantities leave as exact strings, never as JSON floats."""
    return {k: str(v) if isinstance(v, Decimal) else v for k, v in values.items()}


PERIOD_PARAM = OpenApiParameter("period", str, description="Month, YYYY-MM (default: this one).")
TEAM_PARAM = OpenApiParameter("team", str, description="Team slug (default: all you may see).")
UNIT_PARAM = OpenApiParameter(
    "unit", str, description="Organisation unit slug: the teams below it."
)
GROUP_PARAM = OpenApiParameter(
    "group", str, enum=["team", "unit"],
    description="unit: also the teams' figures summed per child unit of `unit` (default the root).",
)  # fmt: skip


def _period_from(request) -> BillingPeriod:
    now = timezone.now()
    text = request.query_params.get("period") or f"{now:%Y-%m}"
    month = parse_period(text, now=now)
    # A read never creates the period: a month without its row is an empty open draft.
    return selectors.period_for_month(month) or BillingPeriod(month=month)


class UsageView(APIView):
    """Showback for teams: GPU-hours, busy and idle hours and cost per team for a month
    (members see their own teams; finance and platform admins every team and the platform).
    `unit=<slug>` keeps the teams below a unit (and leaves the platform out, as `team` does);
    `group=unit` adds `units`: the teams' rows summed per child unit of `unit` (of the root
    without it), to the cent. A team or unit one cannot see is 404, a bad group 400."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        parameters=[PERIOD_PARAM, TEAM_PARAM, UNIT_PARAM, GROUP_PARAM],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        period = _period_from(request)
        unit_slug = request.query_params.get("unit") or ""
        team_slug = request.query_params.get("team") or ""
        try:
            scope = unit_scope(
                user=request.user,
                unit_slug=unit_slug,
                team_slug=team_slug,
                group=request.query_params.get("group") or "team",
            )
        except TeamNotVisible as exc:
            raise Http404("No such team or unit.") from exc
        in_scope = {team.pk for team in scope.teams}
        with_platform = is_billing_admin(request.user) and not unit_slug and not team_slug
        rows = [
            row
            for row in (exports.team_totals(period) if period.pk else [])
            if row["team_id"] in in_scope or (row["team_id"] is None and with_platform)
        ]
        showback = is_showback()
        body = {
            "period": f"{period.month:%Y-%m}",
            "status": period.status,
            "draft": not period.is_closed,
            "mode": settings.BILLING_MODE,
            "unit": unit_slug or None,
            "group": "unit" if scope.group_units is not None else "team",
            "teams": [
                {"team": row["sub_account"]} | _usage_item(row, showback=showback) for row in rows
            ],
        }
        if scope.group_units is not None:
            body["units"] = [
                {"unit": row["unit"], "name": row["name"], "teams": row["teams"]}
                | _usage_item(row, showback=showback)
                for row in selectors.grouped_totals(rows, scope.group_units)
                if row["kind"] == "unit"
            ]
        return Response(body)


def _usage_item(row: dict, *, showback: bool) -> dict:
    """A team's or a unit's hours in the usage reply, and its money unless the portal runs in
    showback mode."""
    item = {
        "gpu_hours": row["gpu_hours"],
        "busy_gpu_hours": row["busy_gpu_hours"],
        "held_idle_gpu_hours": row["held_idle_gpu_hours"],
    }
    if not showback:
        item |= {
            "cost": row["cost"],
            "held_idle_cost": row["held_idle_cost"],
            "over_quota_cost": row["over_quota_cost"],
            "currency": settings.BILLING_CURRENCY,
        }
    return decimals_as_strings(item)


class ChargebackView(APIView):
    """Finance chargeback export of a month: csv / json (team x GPU model x day, or `level=detail`
    per GPU and booking/job), xlsx (summary + detail sheets), focus (FinOps FOCUS CSV, version
    1.3 unless `focus_version=1.2`). Exports of an open month are drafts. Finance and platform
    admins only."""

    permission_classes = [BillingAdminOnly]

    def perform_content_negotiation(self, request, force=False):
        # `?format=` names the export here, not one of DRF's renderers; errors render as JSON.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        parameters=[
            OpenApiParameter("period", str, required=True, description="Month, YYYY-MM."),
            TEAM_PARAM,
            OpenApiParameter("format", str, enum=ExportFormat.values, description="Default csv."),
            OpenApiParameter("level", str, enum=[exports.SUMMARY, exports.DETAIL]),
            OpenApiParameter(
                "focus_version",
                str,
                enum=list(focus.FOCUS_VERSIONS),
                description="FOCUS version of format=focus (default 1.3).",
            ),
        ],
        responses={(200, "text/csv"): OpenApiTypes.BINARY},
    )
    def get(self, request):
        if not request.query_params.get("period"):
            raise ApplicationError(
                "period is required, e.g. ?period=2026-11.", code="invalid_period"
            )
        fmt = request.query_params.get("format", ExportFormat.CSV)
        if fmt not in ExportFormat.values:
            raise ApplicationError(
                f"format must be one of {', '.join(ExportFormat.values)}.", code="invalid_format"
            )
        level = request.query_params.get("level", exports.SUMMARY)
        if level not in (exports.SUMMARY, exports.DETAIL):
            raise ApplicationError("level must be summary or detail.", code="invalid_level")
        if fmt == ExportFormat.FOCUS and is_showback():
            raise ApplicationError(
                "FOCUS exports carry costs; this portal runs in showback mode (GPU-hours only).",
                code="showback_mode",
            )
        version = focus_version_from(request.query_params)
        period = _period_from(request)
        team_id = None
        if request.query_params.get("team"):
            team_id = get_object_or_404(Team, slug=request.query_params["team"]).pk
        scope = exports.ExportScope(period=period, team_id=team_id, level=level)
        return export_response(scope, fmt, focus_version=version)


def focus_version_from(params) -> str:
    """The FOCUS version asked for (default 1.3); anything else is a 400 naming the choices."""
    version = params.get("focus_version") or focus.DEFAULT_FOCUS_VERSION
    if version not in focus.FOCUS_VERSIONS:
        raise ApplicationError(
            f"focus_version must be one of {', '.join(sorted(focus.FOCUS_VERSIONS))} "
            f"(default {focus.DEFAULT_FOCUS_VERSION}).",
            code="invalid_focus_version",
        )
    return version


def export_response(
    scope: exports.ExportScope, fmt: str, *, focus_version: str = focus.DEFAULT_FOCUS_VERSION
):
    """The streaming download of an export (shared by the API and the finance page)."""
    # Level and team are in the name so that the summary and the detail download of the same
    # month (or two teams' files) do not overwrite each other in a downloads folder.
    name = f"chargeback-{scope.period.month:%Y-%m}"
    if scope.level == exports.DETAIL:
        name += "-detail"
    if scope.team_id is not None:
        name += f"-{Team.objects.get(pk=scope.team_id).slug}"
    name += "-draft" if scope.draft else ""
    if fmt == ExportFormat.XLSX:
        response = FileResponse(
            exports.xlsx_file(scope),
            as_attachment=True,
            filename=f"{name}.xlsx",
            content_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        )
    elif fmt == ExportFormat.JSON:
        response = streaming_download(
            exports.json_chunks(scope, exports.table_rows(scope)),
            filename=f"{name}.json",
            content_type="application/json",
        )
    else:
        if fmt == ExportFormat.FOCUS:
            chunks = focus.focus_csv_chunks(scope, focus_version)
            name = f"{name}-focus-{focus_version}"
        else:
            showback = is_showback()
            header = exports.table_columns(scope.level, showback=showback)
            chunks = exports.csv_chunks(header, exports.table_rows(scope))
        response = streaming_download(
            chunks,
            filename=f"{name}.csv",
            content_type="text/csv; charset=utf-8",
        )
    response["X-Chargeback-Draft"] = "true" if scope.draft else "false"
    response.status_code = status.HTTP_200_OK
    return response


class BookingPriceQuerySerializer(serializers.Serializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    count = serializers.IntegerField(min_value=1, max_value=10_000)
    start = serializers.DateTimeField()
    end = serializers.DateTimeField(required=False)
    duration_hours = serializers.DecimalField(
        max_digits=8, decimal_places=2, min_value=Decimal("0.01"), required=False
    )

    def validate(self, attrs):
        if "end" not in attrs and "duration_hours" not in attrs:
            raise serializers.ValidationError({"end": "Give an end or a duration_hours."})
        if "end" not in attrs:
            attrs["end"] = attrs["start"] + timedelta(hours=float(attrs["duration_hours"]))
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "The end must be after the start."})
        if attrs["end"] - attrs["start"] > timedelta(days=366):
            raise serializers.ValidationError({"end": "Price at most a year at once."})
        return attrs


class BookingPriceView(APIView):
    """The price of a booking before it is made, as it will be charged: list price, the
    over-quota premium of the GPUs above the team's guarantee (given what the team holds then)
    and the energy estimate, cut where a rate card starts or ends. Members price their own
    teams' bookings (another team is 404)."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        parameters=[
            OpenApiParameter("team", str, required=True),
            OpenApiParameter("gpu_model", str, required=True),
            OpenApiParameter("count", int, required=True),
            OpenApiParameter("start", OpenApiTypes.DATETIME, required=True),
            OpenApiParameter("end", OpenApiTypes.DATETIME),
            OpenApiParameter("duration_hours", float),
        ],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        query = BookingPriceQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        team = data["team"]
        if not Team.objects.for_user(request.user).filter(pk=team.pk).exists():
            raise Http404
        price = pricing.quote_booking(
            team=team,
            gpu_model=data["gpu_model"],
            count=data["count"],
            start=data["start"],
            end=data["end"],
        )
        return Response(
            {
                "team": team.slug,
                "gpu_model": data["gpu_model"].name,
                "start": data["start"].isoformat(),
                "end": data["end"].isoformat(),
                **price.as_dict(),
            }
        )
