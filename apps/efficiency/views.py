from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.billing.exports import csv_chunks
from apps.efficiency import advice, reports, services
from apps.efficiency.forms import AdviceFilterForm
from apps.efficiency.models import DigestSetting
from apps.efficiency.serializers import ITEM_COLUMNS, item_rows
from apps.teams.models import Team
from portal.downloads import streaming_download
from portal.exceptions import ApplicationError

PAGE_SIZE = 25


def _digest_rows(user) -> list[dict]:
    """The teams whose digest the user may switch, with its state."""
    teams = list(Team.objects.managed_by(user).filter(is_active=True).order_by("slug"))
    off = set(
        DigestSetting.objects.filter(team__in=teams, weekly_digest=False).values_list(
            "team_id", flat=True
        )
    )
    return [{"team": t, "on": t.pk not in off} for t in teams]


@login_required
def advice_view(request):
    """Right-sizing advice over a window: totals per team and per user, then the jobs and
    bookings with findings, largest saving first."""
    form = AdviceFilterForm(request.GET or None)
    if request.GET and not form.is_valid():
        items, filters = [], None
    else:
        if not request.GET:
            form = AdviceFilterForm({})
            form.is_valid()
        filters = form.filters(user=request.user)
        items = advice.right_sizing(user=request.user, filters=filters)
    page = Paginator(items, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "efficiency/advice.html",
        {
            "form": form,
            "filters": filters,
            "page": page,
            "team_totals": advice.totals(items, by="team"),
            "user_totals": advice.totals(items, by="user"),
            "total_saving": sum((i.saving for i in items), start=Decimal(0)),
            "query": query.urlencode(),
            "digest_rows": _digest_rows(request.user),
            "visible_teams": Team.objects.for_user(request.user).order_by("slug"),
        },
    )


def _csv(rows, header: list[str], name: str) -> StreamingHttpResponse:
    return streaming_download(
        csv_chunks(header, rows), filename=f"{name}.csv", content_type="text/csv; charset=utf-8"
    )


def _bad_window(form) -> HttpResponseBadRequest:
    errors = "; ".join(f"{field}: {' '.join(e)}" for field, e in form.errors.items())
    return HttpResponseBadRequest(f"Bad filter: {errors}\n", content_type="text/plain")


@login_required
def advice_csv_view(request):
    """The advice of the page's filters as CSV: one line per finding."""
    form = AdviceFilterForm(request.GET)
    if not form.is_valid():
        return _bad_window(form)
    filters = form.filters(user=request.user)
    items = advice.right_sizing(user=request.user, filters=filters)
    name = f"right-sizing-{filters.start:%Y%m%d}-{filters.end:%Y%m%d}"
    return _csv(iter(item_rows(items)), ITEM_COLUMNS, name)


@login_required
def team_jobs_csv_view(request, slug: str):
    """A team's jobs of the window with cost and efficiency, as CSV (anyone who sees the
    team's jobs)."""
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    form = AdviceFilterForm(request.GET)
    if not form.is_valid():
        return _bad_window(form)
    data = form.cleaned_data
    rows = reports.team_job_rows(team=team, start=data["start"], end=data["end"])
    name = f"jobs-{team.slug}-{data['start']:%Y%m%d}-{data['end']:%Y%m%d}"
    return _csv(rows, reports.TEAM_JOB_COLUMNS, name)


@login_required
@require_POST
def digest_toggle_view(request, slug: str):
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    weekly = request.POST.get("weekly_digest") == "on"
    try:
        services.digest_setting_set(team=team, weekly_digest=weekly, actor=request.user)
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        state = "on" if weekly else "off"
        messages.success(request, f"The weekly right-sizing email of {team.slug} is {state}.")
    return redirect("efficiency:advice")
