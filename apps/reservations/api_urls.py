"""API routes of the reservations app, mounted under /api/v1/."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.reservations.api import AvailabilityTimelineView, AvailabilityView, ReservationViewSet

router = SimpleRouter()
router.register("reservations", ReservationViewSet, basename="reservation")

urlpatterns: list = [
    path("availability/", AvailabilityView.as_view(), name="availability"),
    path(
        "availability/timeline/",
        AvailabilityTimelineView.as_view(),
        name="availability-timeline",
    ),
    *router.urls,
]
