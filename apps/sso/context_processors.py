from django.conf import settings


def login_options(request) -> dict:
    """Which ways to sign in the login page offers."""
    return {
        "sso_enabled": settings.SSO_ENABLED,
        "password_login_enabled": settings.PASSWORD_LOGIN_ENABLED,
    }
