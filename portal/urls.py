from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.dashboards.views import home_view
from apps.sso.views import PortalLogoutView
from apps.teams.views import quota_admin_view
from portal import views

# Apps with an api_urls module of routes under /api/v1/.
API_APPS = (
    "teams",
    "fleet",
    "reservations",
    "telemetry",
    "jobs",
    "billing",
    "dashboards",
    "efficiency",
)

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
    # The API root leads to its documentation; each app wires its own routes.
    path("api/v1/", RedirectView.as_view(pattern_name="swagger-ui"), name="api-root"),
    *(path("api/v1/", include(f"apps.{app}.api_urls")) for app in API_APPS),
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
