from collections import defaultdict
from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from apps.fleet.models import GpuModel
from apps.reservations import selectors, services
from apps.reservations.availability import round_up_to_slot
from apps.reservations.choices import OPEN_STATUSES, ReservationStatus
from apps.reservations.filters import ReservationPageFilter
from apps.reservations.forms import CancelForm, ExtendForm, ReservationForm, searched_start
from apps.reservations.policy import BookingPolicy
from apps.reservations.tables import ReservationTable
from apps.teams.models import Team
from portal.exceptions import ApplicationError, show_on_form
from portal.formatting import format_when
from portal.tables import configure
from portal.timezones import local_day, local_days

WHEN = {
    "upcoming": ("Upcoming", [ReservationStatus.SCHEDULED]),
    "active": ("Active", [ReservationStatus.ACTIVE]),
    "past": (
        "Past",
        [ReservationStatus.COMPLETED, ReservationStatus.CANCELLED, ReservationStatus.RELEASED],
    ),
}


@login_required
def reservation_list_view(request):
    """The user's teams' bookings in one tab (upcoming, active, past), with filters and
    sortable columns; upcoming and active read soonest first, past latest first."""
    when = request.GET.get("when", "upcoming")
    if when not in WHEN:
        when = "upcoming"
    reservations = (
        selectors.reservation_list(user=request.user)
        .filter(status__in=WHEN[when][1])
        .order_by("start" if when != "past" else "-start", "id")
    )
    filters = ReservationPageFilter(
        _filter_data(request.GET), queryset=reservations, request=request
    )
    table = ReservationTable(filters.qs)
    table.empty_text = _empty_text(request, when, filtered=filters.is_bound)
    configure(request, table, per_page=25)
    selectors.with_figures(row.record for row in table.page.object_list)
    return render(
        request,
        "reservations/reservation_list.html",
        {
            "table": table,
            "filters": filters,
            "problems": filters.problems(),
            "when": when,
            "tabs": {k: v[0] for k, v in WHEN.items()},
        },
    )


def _filter_data(query):
    """The filters asked for, or None when only the tab, sort or page is: an unbound filter
    set offers no "Clear" link."""
    asked = query.copy()
    for key in ("when", "sort", "page"):
        asked.pop(key, None)
    return query if asked else None


def _empty_text(request, when: str, *, filtered: bool) -> str:
    if filtered:
        return f"No {when} reservations match."
    text = format_html("No {} reservations.", when)
    if request.user.is_authenticated and Team.objects.member_of(request.user).exists():
        text = format_html(
            '{} <a href="{}">Reserve GPUs</a>.', text, reverse("reservations:reservation-create")
        )
    return text


@login_required
def reservation_detail_view(request, pk: int):
    """One booking: its GPUs, and what higher apps add (efficiency, cost so far)."""
    reservation = get_object_or_404(selectors.reservation_list(user=request.user), pk=pk)
    selectors.with_figures([reservation])
    holdings = reservation.holdings.filter(active=True).select_related("gpu__node")
    return render(
        request,
        "reservations/reservation_detail.html",
        {
            "r": reservation,
            "holdings": holdings.order_by("gpu__node__hostname", "gpu__index"),
            "changes": selectors.holding_changes(reservation=reservation),
        },
    )


def _timeline_rows(gpu_model, team=None, *, days: int = 8, bucket_hours: int = 3):
    """Free GPUs per block for today and the next 7 whole days in the reader's zone (no more
    than `team` may book), as rows of (day, [(moment, free, past)]); blocks run from the
    reader's midnight today, so a booking made for a Saturday evening is in Saturday's row."""
    now = timezone.now()
    bucket = timedelta(hours=bucket_hours)
    span = local_days(local_day(now), days)
    points = selectors.free_capacity(
        gpu_model=gpu_model,
        start=span[0][1],
        end=span[-1][2],
        bucket=bucket,
        team=team,
    )
    rows = defaultdict(list)
    for moment, free in points:
        rows[local_day(moment)].append((moment, free, moment + bucket <= now))
    return list(rows.items())


def _booking_team_and_model(request, form) -> tuple[Team | None, GpuModel | None]:
    """The team the form books for (the chosen one, else the user's first) and the GPU model
    to search (the chosen one, else the first the team has a quota for)."""
    search = request.POST if request.method == "POST" else request.GET
    teams = form.fields["team"].queryset.order_by("slug")
    team = teams.filter(slug=search.get("team")).first() or teams.first()
    model = GpuModel.objects.filter(name=search.get("gpu_model")).first()
    if model is None and team is not None:
        model = next(iter(selectors.team_quota_models(team=team)), None)
    return team, model or GpuModel.objects.order_by("name").first()


@login_required
def reservation_create_view(request):
    policy = BookingPolicy.from_settings()
    if "csrfmiddlewaretoken" in request.GET:
        # "Find free slots" submits the booking form by GET; the CSRF token must not stay in
        # the address bar, history or logs.
        query = request.GET.copy()
        query.pop("csrfmiddlewaretoken")
        return redirect(f"{request.path}?{query.urlencode()}")
    # "Find free slots" is a GET of the same form: keep what was typed, so that "Book"
    # books the model and count the suggestions were found for.
    initial = {
        name: value
        for name, value in request.GET.items()
        if name in ReservationForm.base_fields and name != "tz_offset"
    }
    form = ReservationForm(request.POST or None, user=request.user, initial=initial)
    team, model = _booking_team_and_model(request, form)
    if model is not None and "gpu_model" not in initial:
        form.initial["gpu_model"] = model.name
    if team is not None and "team" not in initial:
        form.initial["team"] = team.slug
    suggestions, conflict = [], None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            reservation = services.reservation_create(
                team=data["team"],
                user=request.user,
                gpu_model=data["gpu_model"],
                count=data["count"],
                start=data["start"],
                end=data["end"],
                purpose=data["purpose"],
                same_node=data["same_node"],
            )
        except (ApplicationError, ValidationError) as error:
            # The service names the booking's end; the form asks for its duration.
            show_on_form(form, error, field_names={"end": "duration_hours"})
            conflict = getattr(error, "detail", None)
        else:
            messages.success(request, f"Booked: reservation #{reservation.pk}.")
            return redirect("reservations:reservation-list")
    search = request.POST if request.method == "POST" else request.GET
    try:
        count = max(1, min(int(search.get("count", 1)), 10_000))
        hours = max(0.25, min(float(search.get("duration_hours", 4)), 24 * 7))
    except ValueError:
        count, hours = 1, 4.0
    if model is not None:
        duration = round_up_to_slot(timedelta(hours=hours), policy.slot)
        suggestions = selectors.slots_from_now(
            gpu_model=model,
            count=count,
            duration=duration,
            # From the start the person typed (in their zone), not from now: a search for
            # tomorrow must not offer tonight.
            after=searched_start(search),
            same_node=bool(search.get("same_node")),
            limit=5,
            team=team,
        )
    return render(
        request,
        "reservations/reservation_form.html",
        {
            "form": form,
            "gpu_model": model,
            "team": team,
            "suggestions": suggestions,
            "timeline": _timeline_rows(model, team) if model else [],
            "conflict": conflict,
            "policy": policy,
            "slot_minutes": int(policy.slot.total_seconds() // 60),
        },
    )


@login_required
@require_POST
def reservation_cancel_view(request, pk: int):
    reservation = get_object_or_404(selectors.reservation_list(user=request.user), pk=pk)
    form = CancelForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        services.reservation_cancel(reservation=reservation, actor=request.user, reason=reason)
    except (ApplicationError, ValidationError) as error:
        messages.error(request, getattr(error, "message", None) or " ".join(error.messages))
    else:
        messages.success(request, f"Reservation #{pk} cancelled; its GPUs are free again.")
    return redirect(request.POST.get("next") or "reservations:reservation-list")


@login_required
@require_POST
def reservation_extend_view(request, pk: int):
    reservation = get_object_or_404(selectors.reservation_list(user=request.user), pk=pk)
    form = ExtendForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give the extra hours as a number from 0.25 to 168.")
        return redirect("reservations:reservation-list")
    new_end = reservation.end + timedelta(hours=float(form.cleaned_data["extra_hours"]))
    try:
        services.reservation_extend(reservation=reservation, actor=request.user, new_end=new_end)
    except (ApplicationError, ValidationError) as error:
        messages.error(request, getattr(error, "message", None) or " ".join(error.messages))
    else:
        messages.success(request, f"Reservation #{pk} now ends {format_when(new_end)}.")
    return redirect("reservations:reservation-list")


@login_required
def team_calendar_view(request, slug: str):
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    now = timezone.now()
    days = local_days(local_day(now), 14)
    reservations = list(
        selectors.reservation_list(user=request.user)
        .filter(team=team, status__in=OPEN_STATUSES, end__gt=now, start__lt=days[-1][2])
        .order_by("start", "id")
    )
    # Laid out by the reader's days: a Saturday-evening booking in New York is on Saturday.
    days = [
        (day, [r for r in reservations if r.start < day_end and r.end > day_start])
        for day, day_start, day_end in days
    ]
    return render(request, "reservations/team_calendar.html", {"team": team, "days": days})
