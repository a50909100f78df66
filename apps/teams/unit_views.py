"""The organisation units pages: the tree, and one unit's page where its admins (and platform
admins) add child units and teams, move them, set quotas and name admins. Thin: the services
decide and their messages are shown on the form that was sent."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render

from apps.teams import selectors, services
from apps.teams.models import OrgUnit, UnitMembership
from apps.teams.permissions import can_manage_unit, can_set_unit_quota
from apps.teams.unit_forms import (
    TeamMoveForm,
    UnitAdminForm,
    UnitCreateForm,
    UnitMoveForm,
    UnitQuotaForm,
)
from portal.exceptions import ApplicationError, show_on_form


@login_required
def unit_list_view(request):
    return render(
        request, "teams/unit_list.html", {"rows": selectors.unit_overview(user=request.user)}
    )


def _forms(request, unit: OrgUnit, data=None, action: str = "") -> dict:
    """Every form the user may use on this unit's page; the one named `action` is bound."""
    managed = OrgUnit.objects.managed_by(request.user).order_by("slug")
    forms = {}

    def bound(name):
        return data if action == name else None

    if can_manage_unit(request.user, unit):
        forms["create_unit"] = UnitCreateForm(bound("create_unit"), prefix="child")
        forms["move_team"] = TeamMoveForm(
            bound("move_team"), teams=unit.teams.order_by("slug"), units=managed, prefix="team"
        )
        forms["add_admin"] = UnitAdminForm(bound("add_admin"), prefix="admin")
    if unit.parent_id is not None and can_manage_unit(request.user, unit.parent):
        forms["move_unit"] = UnitMoveForm(
            bound("move_unit"), units=managed.exclude(pk=unit.pk), prefix="move"
        )
    if can_set_unit_quota(request.user, unit):
        forms["set_quota"] = UnitQuotaForm(bound("set_quota"), prefix="quota")
    return forms


def _apply(request, unit: OrgUnit, action: str, data: dict) -> str:
    """Run the service behind a valid form; returns what to tell the user."""
    actor = request.user
    if action == "create_unit":
        child = services.unit_create(parent=unit, actor=actor, **data)
        return f"Unit {child.name} is created in {unit.name}."
    if action == "move_unit":
        services.unit_move(unit=unit, parent=data["parent"], actor=actor)
        return f"{unit.name} now sits in {data['parent'].name}."
    if action == "move_team":
        services.team_move(team=data["team"], unit=data["unit"], actor=actor)
        return f"Team {data['team'].slug} now sits in {data['unit'].name}."
    if action == "set_quota":
        services.unit_quota_set(unit=unit, actor=actor, **data)
        model = data["gpu_model"].name if data["gpu_model"] else "any model"
        return f"Quota of {unit.name} for {model} saved."
    services.unit_admin_add(unit=unit, user=data["username"], actor=actor)
    return f"{data['username'].username} is now an admin of {unit.name}."


@login_required
def unit_detail_view(request, slug: str):
    unit = get_object_or_404(OrgUnit.objects.for_user(request.user), slug=slug)
    action = request.POST.get("action", "") if request.method == "POST" else ""
    forms = _forms(request, unit, request.POST, action)
    if request.method == "POST":
        form = forms.get(action)
        if form is None:
            raise PermissionDenied("You may not change this unit in that way.")
        if form.is_valid():
            try:
                done = _apply(request, unit, action, form.cleaned_data)
            except (ApplicationError, ValidationError) as error:
                show_on_form(form, error, field_names={"user": "username"})
            else:
                messages.success(request, done)
                return redirect("teams:unit-detail", slug=unit.slug)
    row = next(r for r in selectors.unit_overview(user=request.user) if r["unit"].pk == unit.pk)
    children = OrgUnit.objects.for_user(request.user).filter(parent=unit).order_by("name")
    return render(
        request,
        "teams/unit_detail.html",
        {"unit": unit, "row": row, "children": children, "forms": forms, "action": action},
    )


@login_required
def unit_admin_remove_view(request, slug: str, username: str):
    if request.method != "POST":
        return redirect("teams:unit-detail", slug=slug)
    unit = get_object_or_404(OrgUnit.objects.for_user(request.user), slug=slug)
    membership = get_object_or_404(UnitMembership, unit=unit, user__username=username)
    if not can_manage_unit(request.user, unit):
        raise PermissionDenied("Only platform admins and the unit's admins may remove its admins.")
    try:
        services.unit_admin_remove(unit=unit, user=membership.user, actor=request.user)
    except (ApplicationError, ValidationError) as error:
        messages.error(request, getattr(error, "message", " ".join(error.messages)))
    else:
        messages.success(request, f"{username} is no longer an admin of {unit.name}.")
    return redirect("teams:unit-detail", slug=unit.slug)
