from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.fleet import selectors, services
from apps.fleet.filters import GpuFilter, NodeFilter
from apps.fleet.models import Gpu, MaintenanceWindow, Node
from portal.roles import IsPlatformAdmin, ReadAnyWritePlatformAdmin


class NodeSerializer(serializers.ModelSerializer):
    gpu_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "hostname",
            "status",
            "labels",
            "last_seen",
            "gpu_count",
            "power_state",
            "power_state_since",
            "power_state_by",
        ]


class GpuSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.hostname", read_only=True)
    model = serializers.CharField(source="model.name", read_only=True)
    mig_parent = serializers.CharField(
        source="mig_parent.uuid", read_only=True, default=None, allow_null=True
    )

    class Meta:
        model = Gpu
        fields = [
            "id",
            "uuid",
            "node",
            "index",
            "model",
            "nvlink_domain",
            "status",
            "health",
            "mig_parent",
            "mig_profile",
        ]


class StateChangeInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class _StateChangeActions:
    """drain / undrain / retire actions shared by nodes and GPUs (platform admins only)."""

    def _change(self, request, operation: str):
        obj = self.get_object()
        data = StateChangeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        change = self.change_state(obj, operation, request.user, data.validated_data["reason"])
        body = self.get_serializer(self.get_queryset().get(pk=change.obj.pk)).data
        return Response({**body, "relocation": change.relocation})

    @extend_schema(request=StateChangeInputSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsPlatformAdmin])
    def drain(self, request, pk=None):
        return self._change(request, "drain")

    @extend_schema(request=StateChangeInputSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsPlatformAdmin])
    def undrain(self, request, pk=None):
        return self._change(request, "undrain")

    @extend_schema(request=StateChangeInputSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsPlatformAdmin])
    def retire(self, request, pk=None):
        return self._change(request, "retire")


@extend_schema_view(
    list=extend_schema(summary="List GPU nodes"),
    retrieve=extend_schema(summary="Get one GPU node"),
    drain=extend_schema(summary="Drain a node: no new work; its bookings move to other GPUs"),
    undrain=extend_schema(summary="Put a drained node back in service"),
    retire=extend_schema(summary="Retire a node and its GPUs for good"),
    power_off=extend_schema(
        summary="Power a node off (refused, 409, while it runs jobs or has a booking soon)"
    ),
    power_on=extend_schema(summary="Power a node on"),
)
class NodeViewSet(_StateChangeActions, viewsets.ReadOnlyModelViewSet):
    """GPU nodes. Every signed-in user reads; platform admins drain, undrain and retire."""

    serializer_class = NodeSerializer
    filterset_class = NodeFilter
    ordering_fields = ["hostname", "status", "last_seen"]

    def get_queryset(self):
        return selectors.node_list()

    def _power(self, request, operation: str):
        node = self.get_object()
        data = StateChangeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.node_power_request(
            node=node,
            operation=operation,
            actor=request.user,
            reason=data.validated_data["reason"] or "admin request",
        )
        return Response(self.get_serializer(self.get_queryset().get(pk=node.pk)).data)

    @extend_schema(request=StateChangeInputSerializer)
    @action(
        detail=True, methods=["post"], url_path="power-off", permission_classes=[IsPlatformAdmin]
    )
    def power_off(self, request, pk=None):
        return self._power(request, "power_off")

    @extend_schema(request=StateChangeInputSerializer)
    @action(
        detail=True, methods=["post"], url_path="power-on", permission_classes=[IsPlatformAdmin]
    )
    def power_on(self, request, pk=None):
        return self._power(request, "power_on")

    def change_state(self, obj, operation, actor, reason):
        return services.node_change_state(node=obj, operation=operation, actor=actor, reason=reason)


@extend_schema_view(
    list=extend_schema(summary="List GPUs and MIG devices"),
    retrieve=extend_schema(summary="Get one GPU"),
    drain=extend_schema(summary="Drain a GPU: no new work; its bookings move to another GPU"),
    undrain=extend_schema(summary="Put a drained GPU back in service"),
    retire=extend_schema(summary="Retire a GPU for good"),
)
class GpuViewSet(_StateChangeActions, viewsets.ReadOnlyModelViewSet):
    """GPUs (and MIG devices), filterable by model, node, status and health."""

    serializer_class = GpuSerializer
    filterset_class = GpuFilter
    ordering_fields = ["node__hostname", "index", "status", "health"]

    def get_queryset(self):
        return selectors.gpu_list()

    def change_state(self, obj, operation, actor, reason):
        return services.gpu_change_state(gpu=obj, operation=operation, actor=actor, reason=reason)


class MaintenanceWindowSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="hostname", queryset=Node.objects.all())
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, default=None, allow_null=True
    )

    class Meta:
        model = MaintenanceWindow
        fields = ["id", "node", "start", "end", "reason", "created_by", "created_at"]
        read_only_fields = ["id", "created_by", "created_at"]


@extend_schema_view(
    list=extend_schema(summary="List maintenance windows"),
    retrieve=extend_schema(summary="Get one maintenance window"),
    create=extend_schema(summary="Plan node maintenance (moves overlapping bookings)"),
    destroy=extend_schema(summary="Cancel a maintenance window"),
)
class MaintenanceWindowViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Planned node maintenance. Everyone reads (bookings avoid these windows); platform
    admins plan and cancel them. Planning moves overlapping bookings to other GPUs."""

    serializer_class = MaintenanceWindowSerializer
    permission_classes = [ReadAnyWritePlatformAdmin]
    filterset_fields = ["node__hostname"]

    def get_queryset(self):
        return MaintenanceWindow.objects.select_related("node", "created_by").order_by("start")

    def create(self, request, *args, **kwargs):
        data = self.get_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        window, relocation = services.maintenance_schedule(
            actor=request.user, **data.validated_data
        )
        body = self.get_serializer(window).data
        return Response({**body, "relocation": relocation}, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        services.maintenance_cancel(window=instance, actor=self.request.user)
