"""API routes of the efficiency app, mounted under /api/v1/."""

from django.urls import path

from apps.efficiency import api

urlpatterns = [
    path("efficiency/advice/", api.AdviceView.as_view(), name="api-efficiency-advice"),
]
