"""API routes of the fleet app, mounted under /api/v1/."""

from rest_framework.routers import SimpleRouter

from apps.fleet.api import GpuViewSet, MaintenanceWindowViewSet, NodeViewSet

router = SimpleRouter()
router.register("nodes", NodeViewSet, basename="node")
router.register("gpus", GpuViewSet, basename="gpu")
router.register("maintenance-windows", MaintenanceWindowViewSet, basename="maintenance-window")

urlpatterns: list = router.urls
