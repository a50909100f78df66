from django.urls import path

from apps.jobs import views
from apps.jobs.views_queue import queue_view
from apps.jobs.views_whatif import what_if_run_status, what_if_view

app_name = "jobs"

urlpatterns: list = [
    path("", views.job_list_view, name="job-list"),
    path("queue/", queue_view, name="queue"),
    path("submit/", views.job_submit_view, name="job-submit"),
    path("<int:pk>/", views.job_detail_view, name="job-detail"),
    path("<int:pk>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("what-if/", what_if_view, name="what-if"),
    path("what-if/runs/<int:pk>/", what_if_run_status, name="what-if-run"),
]
