"""API routes of the jobs app, mounted under /api/v1/."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.jobs.api import JobViewSet
from apps.jobs.api_queue import QueueView

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")

urlpatterns: list = [path("queue/", QueueView.as_view(), name="queue"), *router.urls]
