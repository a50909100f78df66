from django.urls import path

from apps.sso import views

app_name = "sso"
urlpatterns = [
    path("", views.sso_start_view, name="start"),
    path("login/", views.SsoLoginView.as_view(), name="login"),
    path("callback/", views.SsoCallbackView.as_view(), name="callback"),
    path("link/", views.SsoLinkView.as_view(), name="link"),
    path("identities/link/", views.SsoIdentityLinkView.as_view(), name="identity-link"),
]
