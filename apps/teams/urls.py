from django.urls import path

from apps.teams import token_views, unit_views, views

app_name = "teams"
urlpatterns = [
    path("", views.team_list_view, name="team-list"),
    path("new/", views.team_create_view, name="team-create"),
    path("units/", unit_views.unit_list_view, name="unit-list"),
    path("units/<slug:slug>/", unit_views.unit_detail_view, name="unit-detail"),
    path(
        "units/<slug:slug>/admins/<str:username>/remove/",
        unit_views.unit_admin_remove_view,
        name="unit-admin-remove",
    ),
    path("platform-admins/", views.platform_admins_view, name="platform-admins"),
    path("token/", token_views.api_token_list_view, name="api-token"),
    path("me/time-zone/", views.time_zone_view, name="time-zone"),
    path("token/<int:pk>/revoke/", token_views.api_token_revoke_view, name="api-token-revoke"),
    path("<slug:slug>/", views.team_detail_view, name="team-detail"),
    path(
        "<slug:slug>/members/<str:username>/role/",
        views.membership_role_view,
        name="membership-role",
    ),
    path(
        "<slug:slug>/members/<str:username>/remove/",
        views.membership_remove_view,
        name="membership-remove",
    ),
]
