from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.billing.api import (
    AdjustmentViewSet,
    BillingPeriodViewSet,
    BookingPriceView,
    ChargebackView,
    RateCardViewSet,
    UsageView,
)
from apps.billing.api_budgets import BudgetViewSet
from apps.billing.api_units import UnitChargebackView

router = SimpleRouter()
router.register("rate-cards", RateCardViewSet, basename="rate-card")
router.register("billing-periods", BillingPeriodViewSet, basename="billing-period")
router.register("adjustments", AdjustmentViewSet, basename="adjustment")
router.register("budgets", BudgetViewSet, basename="budget")

urlpatterns = [
    path("chargeback/", ChargebackView.as_view(), name="chargeback"),
    path("chargeback/units/", UnitChargebackView.as_view(), name="chargeback-units"),
    path("usage/", UsageView.as_view(), name="usage"),
    path("booking-price/", BookingPriceView.as_view(), name="booking-price"),
    *router.urls,
]
