import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from apps.jobs.choices import WhatIfStatus
from apps.jobs.models import WhatIfRun
from apps.jobs.scheduler import POLICIES
from apps.jobs.whatif import (
    WINDOWS,
    QuotaProposal,
    current_quotas,
    team_changes,
    unit_table,
    whatif_run_start,
)
from apps.jobs.whatif_power import FIELDS as POWER_FIELDS
from apps.jobs.whatif_power import power_saving_from
from apps.teams.permissions import is_platform_admin
from apps.teams.services import quota_numbers_check
from portal.plotting import LAYOUT, figure_json


def _proposals_from(post, current: list[QuotaProposal]) -> tuple[list[QuotaProposal], list[str]]:
    """The edited quota rows of the form, and what was wrong with them."""
    proposals, errors = [], []
    for index, quota in enumerate(current):
        label = f"{quota.team} / {quota.model or 'any model'}"
        try:
            guaranteed = int(post.get(f"g-{index}", quota.guaranteed))
            limit = int(post.get(f"l-{index}", quota.limit))
        except ValueError:
            errors.append(f"{label}: guaranteed and limit must be whole numbers.")
            continue
        try:
            quota_numbers_check(guaranteed=guaranteed, limit=limit)
        except ValidationError as invalid:
            errors.extend(f"{label}: {message}" for message in invalid.messages)
            continue
        proposals.append(QuotaProposal(quota.team, quota.model, guaranteed, limit))
    return proposals, errors


def _quota_rows(current: list[QuotaProposal], typed: dict) -> list[dict]:
    """Each quota with the numbers its inputs show: what was proposed (so the proposal stays
    on screen next to its result), else the current quota."""
    return [
        {
            "team": quota.team,
            "model": quota.model,
            "current_guaranteed": quota.guaranteed,
            "current_limit": quota.limit,
            "guaranteed": typed.get(f"g-{index}", quota.guaranteed),
            "limit": typed.get(f"l-{index}", quota.limit),
        }
        for index, quota in enumerate(current)
    ]


def _typed_from_run(run: WhatIfRun, current: list[QuotaProposal]) -> dict:
    """The run's proposal as form values, matched to today's quota rows by team and model."""
    proposed = {(p["team"], p["model"]): p for p in run.proposed}
    typed = {}
    for index, quota in enumerate(current):
        if (match := proposed.get((quota.team, quota.model))) is not None:
            typed[f"g-{index}"], typed[f"l-{index}"] = match["guaranteed"], match["limit"]
    return typed


@login_required
def what_if_view(request):
    """Platform admins try quota changes on the recent job history before making them. A POST
    records a run and a worker replays it; the page follows the run (?run=<id>)."""
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins may run what-if replays.")
    current = current_quotas()
    run = None
    if request.method == "POST":
        typed = request.POST
        window = request.POST.get("window", "7d")
        policy = request.POST.get("policy", "fairshare")
    elif run_id := request.GET.get("run"):
        if not run_id.isdigit():
            raise Http404("No such what-if run.")
        run = get_object_or_404(WhatIfRun, pk=run_id)
        typed, window, policy = _typed_from_run(run, current), run.window, run.policy
    else:
        typed, window, policy = {}, "7d", "fairshare"
    context = {"quotas": _quota_rows(current, typed), "windows": list(WINDOWS),
               "policies": sorted(POLICIES), "window": window, "policy": policy,
               "power": _power_values(request.POST if request.method == "POST" else None, run),
               "errors": [], "run": run, "result": None}  # fmt: skip
    if request.method == "POST":
        proposals, errors = _proposals_from(request.POST, current)
        if window not in WINDOWS or policy not in POLICIES:
            errors.append("Choose a window and a policy from the lists.")
        power_saving, power_errors = power_saving_from(request.POST)
        errors.extend(power_errors)
        if errors:
            context["errors"] = errors
            return render(request, "jobs/what_if.html", context, status=400)
        run = whatif_run_start(actor=request.user, proposed=proposals, window=window,
                               policy=policy, power_saving=power_saving)  # fmt: skip
        return redirect(f"{reverse('jobs:what-if')}?run={run.pk}")
    if run is not None and run.status == WhatIfStatus.DONE:
        result = context["result"] = run.result
        context["changes"] = team_changes(result)
        context["units"] = unit_table(result)
        if result["teams"] and not result["too_few_jobs"] and not result["nobody_waited"]:
            context["figure"] = _wait_figure(result["teams"])
    return render(request, "jobs/what_if.html", context)


def _power_values(post, run: WhatIfRun | None) -> dict:
    """What the power-saving inputs show: what was typed, else the run's options, else the
    defaults ("power down after" empty: always on)."""
    if post is not None:
        return {field: post.get(field, "") for field in POWER_FIELDS}
    stored = (run.power_saving if run is not None else None) or {}
    values = {}
    for field, (key, _, default, _) in POWER_FIELDS.items():
        value = stored.get(key, default)
        values[field] = "" if value is None else f"{value:g}"
    return values


@login_required
def what_if_run_status(request, pk: int):
    """How far a run got, for the page to poll. Anyone but a platform admin gets 404: runs
    are not theirs to know about."""
    if not is_platform_admin(request.user):
        raise Http404("No such what-if run.")
    run = get_object_or_404(WhatIfRun, pk=pk)
    return JsonResponse(
        {"id": run.pk, "status": run.status, "progress": run.progress, "error": run.error}
    )


def _wait_figure(rows: list[dict]) -> dict:
    figure = go.Figure(
        layout={**LAYOUT, "barmode": "group", "yaxis": {"title": "average wait (h)"}}
    )
    teams = [row["team"] for row in rows]
    figure.add_bar(name="current quotas", x=teams, y=[row["wait_before_h"] for row in rows])
    figure.add_bar(name="proposed quotas", x=teams, y=[row["wait_after_h"] for row in rows])
    return {"wait": figure_json(figure)}
