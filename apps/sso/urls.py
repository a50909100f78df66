from django.urls import path

from apps.sso import views

app_name = "sso"
urlpatterns = [
    path("login/", views.SsoLoginView.as_view(), name="login"),
    path("callback/", views.SsoCallbackView.as_view(), name="callback"),
]
