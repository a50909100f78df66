from django.db.models import Count, QuerySet

from apps.teams.models import Membership, Team


def team_list(*, user) -> QuerySet[Team]:
    return (
        Team.objects.for_user(user)
        .annotate(member_count=Count("memberships", distinct=True))
        .order_by("slug")
    )


def team_members(*, team: Team) -> QuerySet[Membership]:
    return team.memberships.select_related("user").order_by("user__username")


def user_memberships(*, user) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("team")
