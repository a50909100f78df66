from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.teams import selectors, services
from apps.teams.choices import TeamRole
from apps.teams.filters import TeamFilter
from apps.teams.models import Membership, Team, User


class TeamSerializer(serializers.ModelSerializer):
    member_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Team
        fields = ["id", "slug", "name", "cost_center", "is_active", "member_count"]


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


class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    """Teams the caller belongs to (all teams for finance and platform admins), by slug."""

    serializer_class = TeamSerializer
    filterset_class = TeamFilter
    lookup_field = "slug"
    ordering_fields = ["slug", "name"]

    def get_queryset(self):
        return selectors.team_list(user=self.request.user)

    @extend_schema(responses=MembershipSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def members(self, request, slug=None):
        team = self.get_object()
        return Response(MembershipSerializer(selectors.team_members(team=team), many=True).data)

    @extend_schema(request=MembershipInputSerializer, responses=MembershipSerializer)
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

    @extend_schema(request=MembershipInputSerializer, responses={204: None})
    @members.mapping.delete
    def remove_member(self, request, slug=None):
        team = self.get_object()
        username = request.data.get("username") or request.query_params.get("username", "")
        membership = get_object_or_404(team.memberships, user__username=str(username))
        services.membership_remove(membership=membership, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
