from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.fleet.models import GpuModel
from apps.teams import selectors, services
from apps.teams.choices import TeamRole
from apps.teams.filters import TeamFilter
from apps.teams.models import Membership, OrgUnit, Quota, Team, User
from apps.teams.permissions import ReadAnyWritePlatformAdmin
from apps.teams.services import quota_numbers_check


class TeamSerializer(serializers.ModelSerializer):
    member_count = serializers.IntegerField(read_only=True)
    unit = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, help_text="The organisation unit the team sits in."
    )

    class Meta:
        model = Team
        fields = ["id", "slug", "name", "cost_center", "is_active", "member_count", "unit"]


class TeamMoveSerializer(serializers.Serializer):
    unit = serializers.SlugRelatedField(slug_field="slug", queryset=OrgUnit.objects.all())


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "role", "created_at"]


class MembershipInputSerializer(serializers.Serializer):
    username = serializers.SlugRelatedField(
        slug_field="username", queryset=User.objects.filter(is_active=True)
    )
    role = serializers.ChoiceField(choices=TeamRole.choices, default=TeamRole.MEMBER)


class MembershipRoleInputSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=TeamRole.choices)


@extend_schema_view(
    list=extend_schema(summary="List teams"), retrieve=extend_schema(summary="Get one team")
)
class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    """Teams the caller belongs to (all teams for finance and platform admins), by slug."""

    serializer_class = TeamSerializer
    filterset_class = TeamFilter
    lookup_field = "slug"
    ordering_fields = ["slug", "name"]

    def get_queryset(self):
        return selectors.team_list(user=self.request.user).select_related("unit")

    @extend_schema(
        summary="Move a team into another organisation unit",
        description="Platform admins, and admins of both units (or above). Refused (400) when "
        "the team's guarantees do not fit the new unit's envelope.",
        request=TeamMoveSerializer,
        responses=TeamSerializer,
    )
    @action(detail=True, methods=["post"])
    def move(self, request, slug=None):
        team = self.get_object()
        data = TeamMoveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.team_move(team=team, unit=data.validated_data["unit"], actor=request.user)
        return Response(TeamSerializer(self.get_object()).data)

    @extend_schema(summary="List a team's members", responses=MembershipSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def members(self, request, slug=None):
        team = self.get_object()
        return Response(MembershipSerializer(selectors.team_members(team=team), many=True).data)

    @extend_schema(
        summary="Add a member to a team",
        request=MembershipInputSerializer,
        responses={201: MembershipSerializer},
    )
    @members.mapping.post
    def add_member(self, request, slug=None):
        team = self.get_object()
        data = MembershipInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = services.membership_add(
            team=team,
            user=data.validated_data["username"],
            role=data.validated_data["role"],
            actor=request.user,
        )
        return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Remove a member from a team",
        # OpenAPI tooling drops DELETE bodies, so the query parameter is the documented way.
        parameters=[
            OpenApiParameter(
                "username",
                str,
                required=True,
                description='The member to remove (a JSON body {"username": ...} works too).',
            )
        ],
        request=None,
        responses={204: None},
    )
    @members.mapping.delete
    def remove_member(self, request, slug=None):
        team = self.get_object()
        body = request.data if isinstance(request.data, dict) else {}  # JSON may be a list, ...
        username = body.get("username") or request.query_params.get("username", "")
        membership = get_object_or_404(team.memberships, user__username=str(username))
        services.membership_remove(membership=membership, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Change a member's role",
        description="Team admins of the team and platform admins only; audited. A team keeps "
        "at least one team admin (409 last_team_admin).",
        request=MembershipRoleInputSerializer,
        responses=MembershipSerializer,
    )
    @action(detail=True, methods=["patch"], url_path=r"members/(?P<username>[^/]+)")
    def change_member_role(self, request, slug=None, username=None):
        team = self.get_object()
        membership = get_object_or_404(team.memberships, user__username=username)
        data = MembershipRoleInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = services.membership_change_role(
            membership=membership, role=data.validated_data["role"], actor=request.user
        )
        return Response(MembershipSerializer(membership).data)


class QuotaSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    gpu_model = serializers.SlugRelatedField(
        slug_field="name",
        queryset=GpuModel.objects.all(),
        allow_null=True,
        required=False,
        help_text="GPU model name; null for a quota over all models together.",
    )
    guaranteed = serializers.IntegerField(min_value=0, max_value=1_000_000)
    limit = serializers.IntegerField(min_value=0, max_value=1_000_000)

    class Meta:
        model = Quota
        fields = ["id", "team", "gpu_model", "guaranteed", "limit", "updated_at"]
        read_only_fields = ["id", "updated_at"]
        validators = []  # uniqueness is an upsert in quota_set, not an error

    def validate(self, data):
        guaranteed = data.get("guaranteed", getattr(self.instance, "guaranteed", 0))
        limit = data.get("limit", getattr(self.instance, "limit", 0))
        try:
            quota_numbers_check(guaranteed=guaranteed, limit=limit)
        except DjangoValidationError as invalid:
            raise serializers.ValidationError(invalid.message_dict) from invalid
        return data


@extend_schema_view(
    list=extend_schema(summary="List quotas"),
    retrieve=extend_schema(summary="Get one quota"),
    create=extend_schema(summary="Set a team's quota for a GPU model (create or replace)"),
    update=extend_schema(summary="Replace a quota's numbers"),
    partial_update=extend_schema(summary="Change a quota's guaranteed or limit"),
    destroy=extend_schema(summary="Delete a quota"),
)
class QuotaViewSet(viewsets.ModelViewSet):
    """Team quotas per GPU model. Members read their teams', finance all; platform admins write
    (POST creates or replaces the quota of that team and model)."""

    serializer_class = QuotaSerializer
    permission_classes = [ReadAnyWritePlatformAdmin]
    filterset_fields = ["team__slug", "gpu_model__name"]
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def get_queryset(self):
        return (
            Quota.objects.for_user(self.request.user)
            .select_related("team", "gpu_model")
            .order_by("team__slug", "gpu_model__name", "id")
        )

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = services.quota_set(
            team=data["team"],
            gpu_model=data.get("gpu_model"),
            guaranteed=data["guaranteed"],
            limit=data["limit"],
            actor=self.request.user,
        )

    def perform_update(self, serializer):
        quota = serializer.instance
        data = serializer.validated_data
        if data.get("team", quota.team) != quota.team or (
            "gpu_model" in data and data["gpu_model"] != quota.gpu_model
        ):
            raise serializers.ValidationError(
                {"team": "Team and GPU model of a quota cannot change; create another quota."}
            )
        serializer.instance = services.quota_set(
            team=quota.team,
            gpu_model=quota.gpu_model,
            guaranteed=data.get("guaranteed", quota.guaranteed),
            limit=data.get("limit", quota.limit),
            actor=self.request.user,
        )

    def perform_destroy(self, instance):
        services.quota_delete(quota=instance, actor=self.request.user)
