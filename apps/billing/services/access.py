"""Who manages billing: finance users and platform admins."""

from apps.teams.permissions import is_finance, is_platform_admin
from portal.exceptions import PolicyRefusal


def is_billing_admin(user) -> bool:
    """Finance users and platform admins manage prices, periods, budgets and adjustments, and
    see every team's charges."""
    return is_finance(user) or is_platform_admin(user)


def require_billing_admin(user) -> None:
    """Refuse (403) anyone but a finance user or a platform admin."""
    if not is_billing_admin(user):
        raise PolicyRefusal("Only finance users and platform admins may do this.")
