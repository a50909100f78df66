from django.urls import path

from apps.efficiency import views

app_name = "efficiency"

urlpatterns = [
    path("", views.advice_view, name="advice"),
    path("advice.csv", views.advice_csv_view, name="advice-csv"),
    path("teams/<slug:slug>/jobs.csv", views.team_jobs_csv_view, name="team-jobs-csv"),
    path("teams/<slug:slug>/digest/", views.digest_toggle_view, name="digest-toggle"),
]
