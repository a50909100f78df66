"""API routes of the jobs app, mounted under /api/v1/."""

from rest_framework.routers import SimpleRouter

from apps.jobs.api import JobViewSet

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")

urlpatterns: list = router.urls
