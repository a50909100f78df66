from apps.teams.choices import TeamRole
from apps.teams.models import Membership, UnitMembership
from apps.teams.permissions import is_finance, is_platform_admin


def roles(request) -> dict:
    """Role flags the base layout uses to show only the navigation the user may use."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {
            "is_platform_admin": False,
            "is_finance": False,
            "has_teams": False,
            "is_team_admin": False,
            "is_unit_admin": False,
        }
    roles_held = set(
        Membership.objects.filter(user=user, team__is_active=True).values_list("role", flat=True)
    )
    return {
        "is_platform_admin": is_platform_admin(user),
        "is_finance": is_finance(user),
        # Booking and submitting need a team; finance-only users get no "Reserve GPUs" link.
        "has_teams": bool(roles_held),
        "is_team_admin": TeamRole.TEAM_ADMIN in roles_held,
        "is_unit_admin": UnitMembership.objects.filter(user=user).exists(),
    }
