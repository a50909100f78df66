"""API routes of the teams app, mounted under /api/v1/."""

from rest_framework.routers import SimpleRouter

from apps.teams.api import QuotaViewSet, TeamViewSet
from apps.teams.unit_api import UnitViewSet

router = SimpleRouter()
router.register("teams", TeamViewSet, basename="team")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("units", UnitViewSet, basename="unit")

urlpatterns: list = router.urls
