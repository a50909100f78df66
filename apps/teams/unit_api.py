"""The organisation units API: /api/v1/units/. Reads show the units the caller may see (others
are 404); writes go through the services, which refuse (403) what the caller may not do."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.fleet.models import GpuModel
from apps.teams import selectors, services
from apps.teams.models import OrgUnit, User


class UnitQuotaSerializer(serializers.Serializer):
    gpu_model = serializers.SlugRelatedField(
        slug_field="name",
        queryset=GpuModel.objects.all(),
        allow_null=True,
        required=False,
        help_text="GPU model name; null for the unit's quota over all models together.",
    )
    guaranteed = serializers.IntegerField(min_value=0, max_value=1_000_000)
    limit = serializers.IntegerField(min_value=0, max_value=1_000_000)
    guaranteed_below = serializers.IntegerField(
        read_only=True, help_text="What its teams and child units are guaranteed together."
    )


class UnitSerializer(serializers.ModelSerializer):
    parent = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=OrgUnit.objects.all(),
        allow_null=True,
        help_text="The unit this one sits in (null only for the organisation's root).",
    )
    path = serializers.SerializerMethodField(help_text='Names from the root, "A / B / C".')
    teams = serializers.SerializerMethodField(help_text="Slugs of the visible teams in it.")
    quotas = serializers.SerializerMethodField()
    admins = serializers.SerializerMethodField(help_text="Usernames of the unit's admins.")

    class Meta:
        model = OrgUnit
        fields = ["slug", "name", "parent", "path", "cost_center", "teams", "quotas", "admins"]
        extra_kwargs = {"slug": {"validators": []}}  # a taken slug is the service's 409

    def _row(self, unit) -> dict:
        return self.context["rows"][unit.pk]

    def get_path(self, unit) -> str:
        return self._row(unit)["path"]

    def get_teams(self, unit) -> list[str]:
        return [team.slug for team in self._row(unit)["teams"]]

    @extend_schema_field(UnitQuotaSerializer(many=True))
    def get_quotas(self, unit) -> list[dict]:
        return [
            {
                "gpu_model": q["row"].gpu_model.name if q["row"].gpu_model else None,
                "guaranteed": q["row"].guaranteed,
                "limit": q["row"].limit,
                "guaranteed_below": q["below"],
            }
            for q in self._row(unit)["quotas"]
        ]

    def get_admins(self, unit) -> list[str]:
        return self._row(unit)["admins"]


class UnitMoveSerializer(serializers.Serializer):
    parent = serializers.SlugRelatedField(slug_field="slug", queryset=OrgUnit.objects.all())


class UnitAdminSerializer(serializers.Serializer):
    username = serializers.SlugRelatedField(
        slug_field="username", queryset=User.objects.filter(is_active=True)
    )


@extend_schema_view(
    list=extend_schema(summary="List organisation units"),
    retrieve=extend_schema(summary="Get one organisation unit"),
    create=extend_schema(
        summary="Add a child unit",
        description="Platform admins, and admins of the parent unit or a unit above it. "
        "A taken slug is 409.",
    ),
    partial_update=extend_schema(
        summary="Move an organisation unit",
        description='PATCH {"parent": slug} moves the unit with everything below it; refused '
        "(400) below itself or when its guarantees do not fit the new parent's envelope.",
        request=UnitMoveSerializer,
    ),
)
class UnitViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Organisation units the caller may see, in tree order, by slug: all for finance and
    platform admins; a unit admin's units and those below; the units above one's teams."""

    serializer_class = UnitSerializer
    lookup_field = "slug"
    pagination_class = None
    http_method_names = ["get", "post", "put", "patch", "delete", "head"]

    def get_queryset(self):
        return OrgUnit.objects.for_user(self.request.user).order_by("slug")

    def _rows(self) -> dict:
        return {row["unit"].pk: row for row in selectors.unit_overview(user=self.request.user)}

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if not getattr(self, "swagger_fake_view", False):
            context["rows"] = self._rows()
        return context

    def list(self, request, *args, **kwargs):
        rows = self._rows()
        units = [row["unit"] for row in rows.values()]
        return Response(UnitSerializer(units, many=True, context={"rows": rows}).data)

    def _show(self, unit: OrgUnit, code=status.HTTP_200_OK) -> Response:
        return Response(UnitSerializer(unit, context={"rows": self._rows()}).data, status=code)

    def create(self, request, *args, **kwargs):
        data = UnitSerializer(data=request.data, context={"rows": {}})
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        unit = services.unit_create(
            slug=fields["slug"],
            name=fields["name"],
            parent=fields["parent"],
            cost_center=fields.get("cost_center", ""),
            actor=request.user,
        )
        return self._show(unit, status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        if not kwargs.get("partial"):
            return Response(
                {
                    "code": "method_not_allowed",
                    "message": "Use PATCH with a parent to move.",
                    "detail": {},
                },
                status=status.HTTP_405_METHOD_NOT_ALLOWED,
            )
        unit = self.get_object()
        data = UnitMoveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.unit_move(unit=unit, parent=data.validated_data["parent"], actor=request.user)
        return self._show(unit)

    @extend_schema(
        summary="Set an organisation unit's quota for a GPU model",
        description="Platform admins, and admins of a unit above it (never one's own unit). "
        "Refused (400) when the unit's guarantee is less than what sits below it or more than "
        "its parent's envelope leaves.",
        request=UnitQuotaSerializer,
        responses=UnitSerializer,
    )
    @action(detail=True, methods=["put"])
    def quotas(self, request, slug=None):
        unit = self.get_object()
        data = UnitQuotaSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.unit_quota_set(
            unit=unit,
            gpu_model=data.validated_data.get("gpu_model"),
            guaranteed=data.validated_data["guaranteed"],
            limit=data.validated_data["limit"],
            actor=request.user,
        )
        return self._show(unit)

    @extend_schema(
        summary="Add an organisation unit admin",
        request=UnitAdminSerializer,
        responses={201: UnitSerializer},
    )
    @action(detail=True, methods=["post"])
    def admins(self, request, slug=None):
        unit = self.get_object()
        data = UnitAdminSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.unit_admin_add(unit=unit, user=data.validated_data["username"], actor=request.user)
        return self._show(unit, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Remove an organisation unit admin",
        parameters=[
            OpenApiParameter(
                "username",
                str,
                required=True,
                description='The admin to remove (a JSON body {"username": ...} works too).',
            )
        ],
        request=None,
        responses={204: None},
    )
    @admins.mapping.delete
    def remove_admin(self, request, slug=None):
        unit = self.get_object()
        body = request.data if isinstance(request.data, dict) else {}
        username = body.get("username") or request.query_params.get("username", "")
        user = get_object_or_404(User, username=str(username), unit_memberships__unit=unit)
        services.unit_admin_remove(unit=unit, user=user, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
