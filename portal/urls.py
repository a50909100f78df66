from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from apps.dashboards.views import home_view
from apps.fleet.api import GpuViewSet, MaintenanceWindowViewSet, NodeViewSet
from apps.reservations.api import (
    AvailabilityTimelineView,
    AvailabilityView,
    ReservationViewSet,
)
from apps.sso.views import PortalLogoutView
from apps.teams.api import QuotaViewSet, TeamViewSet
from apps.teams.views import quota_admin_view
from apps.telemetry.api import GpuTelemetryView, IdleView
from portal import views

router = DefaultRouter()
router.register("teams", TeamViewSet, basename="team")
router.register("nodes", NodeViewSet, basename="node")
router.register("gpus", GpuViewSet, basename="gpu")
router.register("maintenance-windows", MaintenanceWindowViewSet, basename="maintenance-window")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("reservations", ReservationViewSet, basename="reservation")

urlpatterns = [
    path("", home_view, name="home"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", PortalLogoutView.as_view(), name="logout"),
    path("sso/", include("apps.sso.urls")),
    path("teams/", include("apps.teams.urls")),
    path("fleet/", include("apps.fleet.urls")),
    path("reservations/", include("apps.reservations.urls")),
    path("quotas/", quota_admin_view, name="quotas"),
    path("audit/", include("apps.audit.urls")),
    path("jobs/", include("apps.jobs.urls")),
    path("billing/", include("apps.billing.urls")),
    path("dashboards/", include("apps.dashboards.urls")),
    path("efficiency/", include("apps.efficiency.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/availability/", AvailabilityView.as_view(), name="availability"),
    path(
        "api/v1/availability/timeline/",
        AvailabilityTimelineView.as_view(),
        name="availability-timeline",
    ),
    path("api/v1/telemetry/gpus/<int:pk>/", GpuTelemetryView.as_view(), name="gpu-telemetry"),
    path("api/v1/idle/", IdleView.as_view(), name="idle"),
    path("api/v1/", include("apps.jobs.api_urls")),
    path("api/v1/", include("apps.billing.api_urls")),
    path("api/v1/", include("apps.dashboards.api_urls")),
    path("api/v1/", include("apps.efficiency.api_urls")),
    path("api/v1/", include(router.urls)),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's settings as a script file, not inline (CSP).
    path(
        "api/v1/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="api_docs.html"),
        name="swagger-ui",
    ),
    path("healthz", views.healthz_view, name="healthz"),
    path("metrics", views.metrics_view, name="metrics"),
]

handler403 = "portal.views.error_403"
handler404 = "portal.views.error_404"
handler500 = "portal.views.error_500"
