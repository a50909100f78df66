from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.billing.api import (
    AdjustmentViewSet,
    BillingPeriodViewSet,
    BookingPriceView,
    BudgetViewSet,
    ChargebackView,
    RateCardViewSet,
    UsageView,
)

router = SimpleRouter()
router.register("rate-cards", RateCardViewSet, basename="rate-card")
router.register("billing-periods", BillingPeriodViewSet, basename="billing-period")
router.register("adjustments", AdjustmentViewSet, basename="adjustment")
router.register("budgets", BudgetViewSet, basename="budget")

urlpatterns = [
    path("chargeback/", ChargebackView.as_view(), name="chargeback"),
    path("usage/", UsageView.as_view(), name="usage"),
    path("booking-price/", BookingPriceView.as_view(), name="booking-price"),
    *router.urls,
]
