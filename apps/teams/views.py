from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.forms.utils import pretty_name
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.fleet.models import GpuModel
from apps.teams import selectors, services
from apps.teams.choices import TeamRole
from apps.teams.forms import (
    MembershipAddForm,
    MembershipRoleForm,
    QuotaForm,
    TeamCreateForm,
    TimeZoneForm,
)
from apps.teams.models import OrgUnit, Team
from apps.teams.permissions import (
    can_manage_team,
    can_set_team_quota,
    is_finance,
    is_platform_admin,
)
from apps.teams.services import quota_set
from portal.exceptions import ApplicationError, show_on_form
from portal.formatting import format_count, format_when
from portal.timezones import BROWSER_ZONE_COOKIE, in_zone, zone_or_none


@login_required
def team_list_view(request):
    return render(
        request, "teams/team_list.html", {"teams": selectors.team_list(user=request.user)}
    )


@login_required
def team_create_view(request):
    """Platform admins and unit admins (in their units) create a team, with its quotas if
    they know them already."""
    units = OrgUnit.objects.managed_by(request.user).order_by("slug")
    if not units.exists():
        raise PermissionDenied("Only platform admins and unit admins may create teams.")
    form = TeamCreateForm(
        request.POST or None, units=units, initial={"unit": request.GET.get("unit", "")}
    )
    if request.method == "POST" and form.is_valid():
        try:
            team = services.team_create(actor=request.user, **form.service_kwargs())
        except (ApplicationError, ValidationError) as error:
            show_on_form(form, error)
        else:
            messages.success(request, f"Team {team.slug} is created.")
            return redirect("teams:team-detail", slug=team.slug)
    return render(request, "teams/team_form.html", {"form": form})


@login_required
def platform_admins_view(request):
    """Whom to ask for a quota, a team or an account: the platform admins, with their e-mail."""
    return render(request, "teams/platform_admins.html", {"admins": selectors.platform_admins()})


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
            "member_figures": _member_figure_rows(team, request.user),
            "member_costs": selectors.member_costs(
                team=team, viewer=request.user, month_text=request.GET.get("cost_period")
            ),
            "efficiency_days": getattr(settings, "EFFICIENCY_WINDOW_DAYS", 30),
            "can_manage": can_manage,
            "unit_path": selectors.unit_path_label(team.unit),
            "unit_visible": OrgUnit.objects.for_user(request.user).filter(pk=team.unit_id).exists(),
            "form": form,
            "roles": TeamRole.choices,
            "quota_rows": selectors.quota_table(teams=[team]),
            # Statements are for the team's admins, finance and platform admins; a showback
            # portal (billing's BillingMode.SHOWBACK) issues none.
            "sees_statement": (can_manage or is_finance(request.user))
            and settings.BILLING_MODE != "showback",
            "manages_digest": can_manage and team.is_active,
            "this_month": timezone.localdate().strftime("%Y-%m"),
        },
    )


def _member_figure_rows(team: Team, viewer) -> list[tuple[str, dict]]:
    """(username, figures) of the members whose GPU use the viewer may see, by username."""
    figures = selectors.member_figures(team=team, viewer=viewer)
    names = dict(
        team.memberships.filter(user_id__in=figures).values_list("user_id", "user__username")
    )
    return sorted((names.get(pk, "(former member)"), f) for pk, f in figures.items())


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


def _posted_quota(form: QuotaForm, rows: list[dict]) -> dict | None:
    """Put a refused quota edit back where it was typed: on its row of the table, or (for a
    new quota) on the add form. Returns what the add form shows, or None."""
    posted = {
        "team": form.data.get("team", ""),
        "gpu_model": form.data.get("gpu_model", ""),
        "guaranteed": form.data.get("guaranteed", ""),
        "limit": form.data.get("limit", ""),
        "errors": [
            error if field == "__all__" else f"{pretty_name(field)}: {error}"
            for field, errors in form.errors.items()
            for error in errors
        ],
    }
    for row in rows:
        model = row["gpu_model"].name if row["gpu_model"] else ""
        if row["team"].slug == posted["team"] and model == posted["gpu_model"]:
            row["posted"] = posted
            return None
    return posted


@login_required
def quota_admin_view(request):
    """Platform admins edit quotas inline, unit admins those of the teams below their units;
    finance reads. Platform admins and finance see the fleet's guarantees against its
    capacity; a unit admin sees their units' envelopes and only their teams' rows and
    history. Over-committed guarantees warn."""
    editable = Team.objects.filter(unit__in=OrgUnit.objects.managed_by(request.user)).order_by(
        "slug"
    )
    can_edit = editable.exists()
    sees_all = is_platform_admin(request.user) or is_finance(request.user)
    if not (can_edit or sees_all):
        raise PermissionDenied("Only platform admins, unit admins and finance can see quotas.")
    form = QuotaForm(request.POST or None)
    if request.method == "POST":
        if not can_edit:
            raise PermissionDenied("Only platform admins and unit admins may change quotas.")
        team = Team.objects.filter(slug=form.data.get("team", "")).first()
        if team is not None and not can_set_team_quota(request.user, team):
            raise PermissionDenied("You may not change this team's quotas.")
        form.fields["team"].queryset = editable
        if form.is_valid():
            data = form.cleaned_data
            try:
                quota_set(
                    team=data["team"],
                    gpu_model=data["gpu_model"],
                    guaranteed=data["guaranteed"],
                    limit=data["limit"],
                    actor=request.user,
                )
            except (ApplicationError, ValidationError) as error:
                show_on_form(form, error)
            else:
                messages.success(request, f"Quota of {data['team'].slug} saved.")
                return redirect("quotas")
    rows = selectors.quota_table(teams=None if sees_all else editable)
    editable_slugs = {team.slug for team in editable}
    for row in rows:
        row["editable"] = row["team"].slug in editable_slugs
    new_posted = _posted_quota(form, rows) if form.is_bound and form.errors else None
    # The fleet's sums are for those who see every team; a unit admin sees their envelopes.
    pressure = selectors.guarantee_pressure() if sees_all else []
    for row in pressure:
        if row["overcommitted"]:
            messages.warning(
                request,
                f"Guarantees for {row['gpu_model'].name} add up to "
                f"{format_count(row['guaranteed'], 'GPU')}, "
                f"more than the {row['capacity']} healthy ones: not every guarantee can be met.",
            )
    envelopes = []
    if not is_platform_admin(request.user):
        envelopes = selectors.unit_envelopes(units=OrgUnit.objects.managed_by(request.user))
    for row in envelopes:
        if row["overcommitted"]:
            messages.warning(
                request,
                f"{row['unit'].name} guarantees {format_count(row['guaranteed'], 'GPU')} of "
                f"{row['gpu_model'].name if row['gpu_model'] else 'all GPU models'}, but what "
                f"sits directly below it is guaranteed {row['guaranteed_below']}.",
            )
    return render(
        request,
        "teams/quota_admin.html",
        {
            "rows": rows,
            "new_posted": new_posted,
            "form": form,
            "can_edit": can_edit,
            "sees_all": sees_all,
            "pressure": pressure,
            "envelopes": envelopes,
            "teams": editable if can_edit else Team.objects.none(),
            "gpu_models": GpuModel.objects.order_by("name"),
            "history": selectors.quota_history(teams=None if sees_all else editable)[:20],
        },
    )


@login_required
def time_zone_view(request):
    """The zone the user reads and types times in; the browser's zone is offered first."""
    browser_zone = request.COOKIES.get(BROWSER_ZONE_COOKIE, "")
    current = request.user.time_zone or (browser_zone if zone_or_none(browser_zone) else "")
    form = TimeZoneForm(request.POST or None, initial={"time_zone": current or settings.TIME_ZONE})
    if request.method == "POST" and form.is_valid():
        try:
            services.user_time_zone_set(user=request.user, name=form.cleaned_data["time_zone"])
        except ValidationError as invalid:
            show_on_form(form, invalid)
        else:
            with in_zone(request.user.time_zone):
                messages.success(
                    request,
                    f"Times now read in {request.user.time_zone}: it is "
                    f"{format_when(timezone.now())}.",
                )
            return redirect("teams:time-zone")
    return render(
        request,
        "teams/time_zone.html",
        {"form": form, "browser_zone": zone_or_none(browser_zone) and browser_zone},
    )
