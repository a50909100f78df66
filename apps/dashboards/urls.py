from django.urls import path

from apps.dashboards import views

app_name = "dashboards"

urlpatterns = [
    path("utilization/", views.utilization_view, name="utilization"),
    path("idle/", views.idle_view, name="idle"),
    path("occupancy/", views.occupancy_view, name="occupancy"),
    path("fleet/", views.fleet_view, name="fleet"),
    path("gpus/<int:pk>/", views.gpu_view, name="gpu"),
]
