"""API routes of the dashboards app, mounted under /api/v1/."""

from django.urls import path

from apps.dashboards import api

urlpatterns = [
    path("dashboards/utilization/", api.UtilizationView.as_view(), name="api-dash-utilization"),
    path("dashboards/idle/", api.IdleView.as_view(), name="api-dash-idle"),
    path("dashboards/occupancy/", api.OccupancyView.as_view(), name="api-dash-occupancy"),
    path("dashboards/fleet-health/", api.FleetHealthView.as_view(), name="api-dash-fleet-health"),
    path(
        "dashboards/quota-pressure/",
        api.QuotaPressureView.as_view(),
        name="api-dash-quota-pressure",
    ),
]
