from apps.teams.permissions import is_finance, is_platform_admin


def roles(request) -> dict:
    """Role flags the base layout uses to show only the navigation the user may use."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"is_platform_admin": False, "is_finance": False}
    return {"is_platform_admin": is_platform_admin(user), "is_finance": is_finance(user)}
