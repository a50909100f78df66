"""API routes of the telemetry app, mounted under /api/v1/."""

from django.urls import path

from apps.telemetry.api import GpuTelemetryView, IdleView

urlpatterns: list = [
    path("telemetry/gpus/<int:pk>/", GpuTelemetryView.as_view(), name="gpu-telemetry"),
    path("idle/", IdleView.as_view(), name="idle"),
]
