"""API routes of the teams app, mounted under /api/v1/."""

from rest_framework.routers import SimpleRouter

from apps.teams.api import QuotaViewSet, TeamViewSet

router = SimpleRouter()
router.register("teams", TeamViewSet, basename="team")
router.register("quotas", QuotaViewSet, basename="quota")

urlpatterns: list = router.urls
