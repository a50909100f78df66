from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.dashboards.selectors import home_summary
from apps.fleet.selectors import fleet_summary
from apps.reservations.selectors import quota_usage_table
from apps.teams import selectors, services
from apps.teams.choices import TeamRole
from apps.teams.forms import MembershipAddForm, MembershipRoleForm
from apps.teams.models import Team
from apps.teams.permissions import can_manage_team
from portal.exceptions import ApplicationError


@login_required
def home_view(request):
    return render(
        request,
        "teams/home.html",
        {
            "memberships": selectors.user_memberships(user=request.user),
            "fleet": fleet_summary(),
            "summary": home_summary(request.user),
        },
    )


@login_required
def team_list_view(request):
    return render(
        request, "teams/team_list.html", {"teams": selectors.team_list(user=request.user)}
    )


@login_required
def team_detail_view(request, slug: str):
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    can_manage = can_manage_team(request.user, team)
    form = MembershipAddForm(request.POST or None) if can_manage else None
    if request.method == "POST" and form is not None and form.is_valid():
        try:
            services.membership_add(
                team=team,
                user=form.cleaned_data["username"],
                role=form.cleaned_data["role"],
                actor=request.user,
            )
        except ApplicationError as error:
            form.add_error("username", error.message)
        else:
            messages.success(request, f"Added {form.cleaned_data['username'].username}.")
            return redirect("teams:team-detail", slug=team.slug)
    return render(
        request,
        "teams/team_detail.html",
        {
            "team": team,
            "members": selectors.team_members(team=team),
            "can_manage": can_manage,
            "form": form,
            "roles": TeamRole.choices,
            "quota_rows": quota_usage_table(teams=Team.objects.filter(pk=team.pk)),
        },
    )


@login_required
@require_POST
def membership_remove_view(request, slug: str, username: str):
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    membership = get_object_or_404(team.memberships, user__username=username)
    try:
        services.membership_remove(membership=membership, actor=request.user)
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Removed {username} from {team.slug}.")
    return redirect("teams:team-detail", slug=team.slug)


@login_required
@require_POST
def membership_role_view(request, slug: str, username: str):
    """A team admin (of this team) or a platform admin changes a member's role; audited."""
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    membership = get_object_or_404(team.memberships, user__username=username)
    form = MembershipRoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Choose a role for {username}: member or team admin.")
        return redirect("teams:team-detail", slug=team.slug)
    try:
        membership = services.membership_change_role(
            membership=membership, role=form.cleaned_data["role"], actor=request.user
        )
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"{username} is now {membership.get_role_display().lower()}.")
    return redirect("teams:team-detail", slug=team.slug)
