from decimal import Decimal

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils import timezone

from apps.billing import exports, figures, member_costs, selectors, services, statements
from apps.billing.choices import ExportFormat, RecoveryMethod, is_showback
from apps.billing.forms import AdjustmentForm, BudgetForm, RateCardEndForm, RateCardForm
from apps.billing.models import Adjustment, BillingPeriod, RateCard
from apps.billing.periods import month_bounds, month_start, parse_period
from apps.billing.recovery import recovery
from apps.billing.services import is_billing_admin
from apps.billing.units import chargeback_units_for, unit_budget_rows, unit_chargeback
from apps.teams.models import OrgUnit, Team
from apps.teams.selectors import BadGrouping, TeamNotVisible, unit_scope
from portal.exceptions import ApplicationError, show_on_form
from portal.timezones import current_zone


def _require_billing_admin(user) -> None:
    if not is_billing_admin(user):
        raise PermissionDenied("Only finance users and platform admins may see billing.")


def _chosen_period(request, *, months_ahead: int = 0) -> tuple[BillingPeriod, str | None]:
    """The period in ?period= (default: this month) and an error message if it was bad."""
    now = timezone.now()
    try:
        text = request.GET.get("period") or f"{now:%Y-%m}"
        month = parse_period(text, now=now, months_ahead=months_ahead)
        error = None
    except ApplicationError as refusal:
        month, error = month_start(now), refusal.message
    # A read never creates the period: a month without its row is an empty open draft.
    return selectors.period_for_month(month) or BillingPeriod(month=month), error


@login_required
def chargeback_view(request):
    """Finance: a month's charges per team, downloads, adjustments and closing the period."""
    _require_billing_admin(request.user)
    period, error = _chosen_period(request)
    if error:
        messages.error(request, error)
    adjustment_form = AdjustmentForm(request.POST or None)
    if request.method == "POST":
        period = services.period_get_or_create(period.month)  # writes may create it; reads not
        try:
            if request.POST.get("action") == "recovery":
                services.cost_recovery_set(
                    actor=request.user, period=period, method=request.POST.get("method", "")
                )
                messages.success(request, f"Platform cost recovery for {period} saved.")
                return redirect(f"{request.path}?period={period.month:%Y-%m}")
            if request.POST.get("action") == "close":
                services.period_close(actor=request.user, period=period)
                messages.success(request, f"{period} is closed; its charges are final.")
                return redirect(f"{request.path}?period={period.month:%Y-%m}")
            if adjustment_form.is_valid():
                data = adjustment_form.cleaned_data
                services.adjustment_create(
                    actor=request.user,
                    team=data["team"],
                    amount=data["amount"],
                    reason=data["reason"],
                    corrects_period=_corrected_period(data["corrects_period"], default=period),
                )
                messages.success(request, f"Adjustment of {data['amount']} booked.")
                return redirect(f"{request.path}?period={period.month:%Y-%m}")
        except (ApplicationError, ValidationError) as refusal:
            show_on_form(adjustment_form, refusal)
    team_slug = request.GET.get("team", "")
    totals, previous_month = selectors.team_totals_with_previous_month(period)
    recovered = recovery(period, totals=totals)
    charged = {row["team_id"] for row in totals}
    for team in Team.objects.filter(pk__in=set(recovered.shares) - charged).order_by("slug"):
        # A team charged nothing this month still pays its share (guarantees, evenly).
        totals.insert(len(totals) - 1 if totals and totals[-1]["team_id"] is None else len(totals),
                      selectors.empty_team_row(team.pk, team.slug))  # fmt: skip
    for row in totals:
        share = (
            -recovered.recovered
            if row["team_id"] is None
            else recovered.shares.get(row["team_id"], Decimal(0))
        )
        row["platform_share"], row["cost_after_recovery"] = share, row["cost"] + share
    if team_slug:
        totals = [t for t in totals if t["sub_account"] == team_slug]
    grand_total = sum((t["cost"] for t in totals), start=Decimal(0))
    grand_previous = sum((t["previous_cost"] or 0 for t in totals), start=Decimal(0))
    return render(
        request,
        "billing/chargeback.html",
        {
            "period": period,
            "periods": BillingPeriod.objects.all()[:24],
            "teams": Team.objects.order_by("slug"),
            "all_teams": Team.objects.order_by("slug"),
            "team_slug": team_slug,
            "totals": totals,
            "grand_total": grand_total,
            "grand_hours": sum((t["gpu_hours"] for t in totals), start=0),
            "previous_month": previous_month,
            "grand_previous": grand_previous,
            "grand_change": grand_total - grand_previous,
            "grand_change_percent": selectors.change_percent(grand_total, grand_previous),
            "formats": ExportFormat.choices,
            "recovery": recovered,
            "recovery_methods": RecoveryMethod.choices,
            "adjustment_form": adjustment_form,
            "adjustments": Adjustment.objects.filter(period_id=period.pk).select_related(
                "team", "corrects_period"
            ),
            "period_text": f"{period.month:%Y-%m}",
            "showback": is_showback(),
            "currency": settings.BILLING_CURRENCY,
            "can_close": not period.is_closed and timezone.now() >= _period_end(period),
        },
    )


def _corrected_period(text: str, *, default: BillingPeriod) -> BillingPeriod:
    """The month an adjustment corrects, from the form's YYYY-MM (default: the month shown);
    a month with no charges has nothing to correct."""
    if not text:
        return default
    try:
        month = parse_period(text, now=timezone.now())
    except ApplicationError as refusal:
        raise ValidationError({"corrects_period": refusal.message}) from None
    corrected = selectors.period_for_month(month)
    if corrected is None:
        raise ValidationError({"corrects_period": f"{text} has no charges to correct."})
    return corrected


def _period_end(period):
    return month_bounds(period.month)[1]


def _rate_card_end(request, card: RateCard, end_form: RateCardEndForm) -> str | None:
    """End `card` at the time typed (in the reader's zone); the refusal's text, or None."""
    if not end_form.is_valid():
        problems = " ".join(end_form.errors.get("effective_to", []))
        return (
            f"Give the end time as a date and time in your zone ({current_zone().key}). {problems}"
        ).strip()
    try:
        services.rate_card_update(
            actor=request.user, card=card, effective_to=end_form.cleaned_data["effective_to"]
        )
    except (ApplicationError, ValidationError) as refusal:
        return " ".join(getattr(refusal, "messages", None) or [str(refusal)])
    messages.success(request, f"Rate card for {card.gpu_model} ends then.")
    return None


@login_required
def rate_cards_view(request):
    """Everyone sees the prices; finance and platform admins add rate cards and end them."""
    can_edit = is_billing_admin(request.user)
    form = RateCardForm(request.POST or None, initial={"currency": settings.BILLING_CURRENCY})
    end_form = RateCardEndForm(request.POST or None)
    end_error = None
    if request.method == "POST":
        if not can_edit:
            raise PermissionDenied("Only finance users and platform admins may change prices.")
        if request.POST.get("card"):
            card = get_object_or_404(RateCard, pk=request.POST["card"])
            form = RateCardForm(initial={"currency": settings.BILLING_CURRENCY})
            end_error = _rate_card_end(request, card, end_form)
            if end_error is None:
                return redirect("billing:rate-cards")
        elif form.is_valid():
            data = dict(form.cleaned_data)
            try:
                services.rate_card_create(
                    actor=request.user, gpu_model=data.pop("gpu_model"), **data
                )
            except (ApplicationError, ValidationError) as refusal:
                show_on_form(form, refusal)
            else:
                messages.success(request, "Rate card added.")
                return redirect("billing:rate-cards")
    return render(
        request,
        "billing/rate_cards.html",
        {
            "cards": RateCard.objects.select_related("gpu_model").order_by(
                "gpu_model__name", "-effective_from"
            ),
            "form": form,
            "end_error": end_error,
            "can_edit": can_edit,
        },
    )


@login_required
def unit_chargeback_view(request):
    """A month's chargeback rolled up by organisation unit, each unit's total beside its teams';
    finance and platform admins see every unit, unit admins their units' subtrees."""
    unit_ids = chargeback_units_for(request.user)
    if unit_ids is not None and not unit_ids:
        raise PermissionDenied("Only finance, platform admins and unit admins see this page.")
    period, error = _chosen_period(request)
    if error:
        messages.error(request, error)
    return render(
        request,
        "billing/unit_chargeback.html",
        {
            "period": period,
            "periods": BillingPeriod.objects.all()[:24],
            "units": unit_chargeback(period, unit_ids=unit_ids),
            "currency": settings.BILLING_CURRENCY,
            "showback": is_showback(),
        },
    )


@login_required
def budgets_view(request):
    """Budgets and burn-down of the teams the user may see; finance and admins set them."""
    can_edit = is_billing_admin(request.user)
    # Budgets are planned ahead: a future month shows its bookings against its budget.
    period, error = _chosen_period(request, months_ahead=services.BUDGET_MONTHS_AHEAD)
    if error:
        messages.error(request, error)
    form = BudgetForm(request.POST or None)
    if request.method == "POST":
        if not can_edit:
            raise PermissionDenied("Only finance users and platform admins may set budgets.")
        if error:  # the month asked for cannot have a budget: set none, not this month's
            form.is_valid()
            form.add_error(None, error)
        elif form.is_valid():
            period = services.period_get_or_create(period.month)
            data = form.cleaned_data
            try:
                services.budget_set(
                    actor=request.user,
                    team=data["team"],
                    unit=data["unit"],
                    period=period,
                    amount=data["amount"],
                    enforcement=data["enforcement"],
                )
            except (ApplicationError, ValidationError) as refusal:
                show_on_form(form, refusal)
            else:
                owner = data["team"] or data["unit"]
                messages.success(request, f"Budget of {owner.slug} for {period} saved.")
                return redirect(f"{request.path}?period={period.month:%Y-%m}")
    now = timezone.now()
    teams = Team.objects.for_user(request.user).order_by("slug")
    rows = [
        {
            **selectors.burn_down(team=team, period=period, now=now),
            "alerts": selectors.budget_alerts_for_teams([team.pk]).filter(
                budget__period_id=period.pk
            ),
        }
        for team in teams
    ]
    return render(
        request,
        "billing/budgets.html",
        {
            "period": period,
            "periods": BillingPeriod.objects.all()[:24],
            "rows": rows,
            "unit_rows": unit_budget_rows(user=request.user, period=period, now=now),
            "statement_teams": _statement_teams(request.user, teams),
            "form": form,
            "can_edit": can_edit,
            "currency": settings.BILLING_CURRENCY,
            "months_ahead": services.BUDGET_MONTHS_AHEAD,
            "forecast_days": settings.BILLING_FORECAST_DAYS,
        },
    )


@login_required
def cost_dashboard_view(request):
    """Cost by team (or by unit: `group=unit`) per month, burn-down against budget, split by
    GPU model, over-quota share. Members see their own teams; finance and platform admins every
    team and the platform. `unit=<slug>` keeps the teams below a unit (and leaves the platform
    out, as a team does); a unit or team the user cannot see is 404."""
    period, error = _chosen_period(request)
    if error:
        messages.error(request, error)
    unit_slug = request.GET.get("unit", "")
    chosen = request.GET.get("team", "")
    try:
        scope = unit_scope(
            user=request.user,
            unit_slug=unit_slug,
            team_slug=chosen,
            group=request.GET.get("group") or "team",
        )
    except TeamNotVisible as exc:
        raise Http404("No such team or unit.") from exc
    except BadGrouping as refusal:
        messages.error(request, f"{refusal.message} Showing the cost by team instead.")
        scope = unit_scope(user=request.user, unit_slug=unit_slug, team_slug=chosen)
    sees_all = is_billing_admin(request.user)
    context = figures.cost_figures(
        period=period,
        teams=list(scope.teams),
        include_platform=sees_all and not chosen and not unit_slug,
        now=timezone.now(),
        group_units=scope.group_units,
    )
    return render(
        request,
        "billing/cost_dashboard.html",
        {
            **context,
            "period": period,
            "periods": BillingPeriod.objects.all()[:24],
            "all_teams": Team.objects.for_user(request.user).order_by("slug"),
            "all_units": OrgUnit.objects.for_user(request.user).order_by("name"),
            "team_slug": chosen,
            "unit_slug": unit_slug,
            "group": "unit" if scope.group_units is not None else "team",
            "currency": settings.BILLING_CURRENCY,
            "showback": is_showback(),
        },
    )


def _refuse_in_showback() -> None:
    if is_showback():
        raise Http404(
            "This portal runs in showback mode (GPU-hours only): it issues no statements."
        )


def _statement_period(text: str) -> BillingPeriod:
    try:
        month = parse_period(text, now=timezone.now())
    except ApplicationError as refusal:
        raise Http404(refusal.message) from None
    return selectors.period_for_month(month) or BillingPeriod(month=month)


def _statement_team(user, slug: str) -> Team:
    """Finance and platform admins read every team's statement, team admins their teams';
    other members of the team are refused (403), everyone else does not see the team (404)."""
    if is_billing_admin(user):
        return get_object_or_404(Team, slug=slug)
    team = get_object_or_404(Team.objects.for_user(user), slug=slug)
    if not Team.objects.managed_by(user).filter(pk=team.pk).exists():
        raise PermissionDenied(
            "Only the team's admins, finance and platform admins see statements."
        )
    return team


def _statement_teams(user, teams) -> set[str]:
    """Slugs of the teams among `teams` whose statements the user may read."""
    if is_showback():
        return set()
    if is_billing_admin(user):
        return {team.slug for team in teams}
    return set(Team.objects.managed_by(user).filter(pk__in=teams).values_list("slug", flat=True))


@login_required
def statement_view(request, period: str, team: str):
    """A team's printable monthly statement (a draft while the month is open)."""
    _refuse_in_showback()
    chosen_team = _statement_team(request.user, team)
    chosen_period = _statement_period(period)
    statement = statements.team_statement(chosen_period, chosen_team)
    return render(request, "billing/statement.html", {"statement": statement})


@login_required
def statements_zip_view(request, period: str):
    """Finance: every team's statement of a month as one ZIP of printable HTML files."""
    _require_billing_admin(request.user)
    _refuse_in_showback()
    chosen_period = _statement_period(period)

    def render_file(statement) -> str:
        return render_to_string("billing/statement_file.html", {"statement": statement})

    archive = statements.statements_zip_file(chosen_period, render_file)
    name = f"statements-{chosen_period.month:%Y-%m}" + (
        "-draft" if not chosen_period.is_closed else ""
    )
    return FileResponse(
        archive, as_attachment=True, filename=f"{name}.zip", content_type="application/zip"
    )


@login_required
def member_costs_csv_view(request, period: str, team: str):
    """A team's cost by member for a month (CSV): team admins, finance and platform admins."""
    chosen_team = _statement_team(request.user, team)
    try:
        month = parse_period(period, now=timezone.now())
    except ApplicationError as refusal:
        return HttpResponse(refusal.message, status=400, content_type="text/plain")
    chosen_period = selectors.period_for_month(month) or BillingPeriod(month=month)
    header, rows = member_costs.member_cost_rows(chosen_period, chosen_team, showback=is_showback())
    text = "".join(exports.csv_chunks(header, iter(rows)))
    response = HttpResponse(text, content_type="text/csv")
    draft = "" if chosen_period.is_closed else "-draft"
    name = f"member-costs-{chosen_period.month:%Y-%m}-{chosen_team.slug}{draft}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
