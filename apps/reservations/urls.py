from django.urls import path

from apps.reservations import views

app_name = "reservations"
urlpatterns = [
    path("", views.reservation_list_view, name="reservation-list"),
    path("new/", views.reservation_create_view, name="reservation-create"),
    path("<int:pk>/", views.reservation_detail_view, name="reservation-detail"),
    path("<int:pk>/cancel/", views.reservation_cancel_view, name="reservation-cancel"),
    path("<int:pk>/extend/", views.reservation_extend_view, name="reservation-extend"),
    path("calendar/<slug:slug>/", views.team_calendar_view, name="team-calendar"),
]
