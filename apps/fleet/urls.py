from django.urls import path

from apps.fleet import views

app_name = "fleet"
urlpatterns = [
    path("", views.fleet_view, name="fleet"),
    path(
        "nodes/<int:pk>/maintenance/",
        views.maintenance_schedule_view,
        name="maintenance-schedule",
    ),
    path("nodes/<int:pk>/power/<str:operation>/", views.node_power_view, name="node-power"),
    path("nodes/<int:pk>/<str:operation>/", views.node_change_state_view, name="node-change-state"),
    path("gpus/<int:pk>/<str:operation>/", views.gpu_change_state_view, name="gpu-change-state"),
    path(
        "maintenance/<int:pk>/cancel/",
        views.maintenance_cancel_view,
        name="maintenance-cancel",
    ),
]
