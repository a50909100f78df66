import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import render
from django.utils import timezone

from apps.jobs.scheduler import POLICIES
from apps.jobs.whatif import WINDOWS, QuotaProposal, current_quotas, what_if
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


def _quota_rows(current: list[QuotaProposal], post) -> list[dict]:
    """Each quota with the numbers its inputs show: what was typed after a run (so the
    proposal stays on screen next to its result), else the current quota."""
    return [
        {
            "team": quota.team,
            "model": quota.model,
            "current_guaranteed": quota.guaranteed,
            "current_limit": quota.limit,
            "guaranteed": post.get(f"g-{index}", quota.guaranteed),
            "limit": post.get(f"l-{index}", quota.limit),
        }
        for index, quota in enumerate(current)
    ]


@login_required
def what_if_view(request):
    """Platform admins try quota changes on the recent job history before making them."""
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins may run what-if replays.")
    current = current_quotas()
    window = request.POST.get("window", "7d")
    policy = request.POST.get("policy", "fairshare")
    context = {"quotas": _quota_rows(current, request.POST if request.method == "POST" else {}),
               "windows": list(WINDOWS), "policies": sorted(POLICIES),
               "window": window, "policy": policy, "errors": [], "result": None}  # fmt: skip
    if request.method == "POST":
        proposals, errors = _proposals_from(request.POST, current)
        if window not in WINDOWS or policy not in POLICIES:
            errors.append("Choose a window and a policy from the lists.")
        context["errors"] = errors
        if not errors:
            result = what_if(
                proposed=proposals, window=WINDOWS[window], policy=policy, now=timezone.now()
            )
            context["result"] = result
            if result["teams"] and not result["too_few_jobs"] and not result["nobody_waited"]:
                context["figure"] = _wait_figure(result["teams"])
    status = 400 if context["errors"] else 200
    return render(request, "jobs/what_if.html", context, status=status)


def _wait_figure(rows: list[dict]) -> dict:
    figure = go.Figure(
        layout={**LAYOUT, "barmode": "group", "yaxis": {"title": "average wait (h)"}}
    )
    teams = [row["team"] for row in rows]
    figure.add_bar(name="current quotas", x=teams, y=[row["wait_before_h"] for row in rows])
    figure.add_bar(name="proposed quotas", x=teams, y=[row["wait_after_h"] for row in rows])
    return {"wait": figure_json(figure)}
