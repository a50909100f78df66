"""Billing pages: chargeback (finance), rate cards, budgets, and the cost dashboard."""

from django.urls import path

from apps.billing import views

app_name = "billing"

urlpatterns = [
    path("", views.chargeback_view, name="chargeback"),
    path("units/", views.unit_chargeback_view, name="chargeback-units"),
    path("rate-cards/", views.rate_cards_view, name="rate-cards"),
    path("budgets/", views.budgets_view, name="budgets"),
    path("cost/", views.cost_dashboard_view, name="cost"),
    path("statements/<str:period>.zip", views.statements_zip_view, name="statements-zip"),
    path("statements/<str:period>/<slug:team>/", views.statement_view, name="statement"),
    path(
        "members/<str:period>/<slug:team>.csv",
        views.member_costs_csv_view,
        name="member-costs-csv",
    ),
]
