"""Reads of the efficiency app: efficiency and cost of jobs and bookings, per member of a team.

Jobs and bookings sit below telemetry and billing, so they get these figures through hooks
(`jobs.figures`, `reservations.figures`, `teams.member_figures`, subscribed in apps.py): each
answers a whole page of rows with a fixed number of queries.
"""

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from apps.billing.choices import ChargeSource
from apps.billing.pricing import RateBook, energy_per_gpu_hour, price_holding
from apps.billing.selectors import cost_by_source
from apps.efficiency.models import AllocationKind, AllocationSummary
from apps.efficiency.usage import Efficiency, Holding, clip, gpu_models, summarize, usage_of
from apps.fleet.models import GpuModel
from apps.jobs.choices import WAITING_STATUSES
from apps.jobs.holdings import allocations_holding, allocations_holding_at
from apps.jobs.models import Job
from apps.reservations.holdings import bookings_holding, bookings_holding_at
from apps.reservations.models import Reservation, ReservationGpu
from apps.teams.models import Quota
from apps.teams.quota_rule import QuotaRow, QuotaRule

CENT = Decimal("0.01")


def _money(value: Decimal | None) -> str | None:
    return None if value is None else str(value.quantize(CENT))


def job_holdings(jobs, *, now: datetime) -> list[Holding]:
    """Every GPU each job held, over all attempts (from prefetched allocations when there)."""
    return [
        Holding(job.pk, a.gpu_id, a.start, a.end or now)
        for job in jobs
        for a in job.allocations.all()
    ]


def booking_holdings(reservations) -> list[Holding]:
    """Every GPU each booking held (active holdings: cancelled future ones never were held)."""
    rows = ReservationGpu.objects.filter(
        reservation__in=[r.pk for r in reservations], active=True
    ).values_list("reservation_id", "gpu_id", "start", "end")
    return [Holding(*row) for row in rows]


def efficiency_by_key(
    holdings: list[Holding],
    *,
    relation: str,
    key: str,
    extra: Q | None = None,
    start=None,
    end: datetime,
) -> dict[int, Efficiency]:
    """Efficiency of each allocation (by key) over its holdings cut to [start, end)."""
    holdings = clip(holdings, start=start, end=end)
    usage = usage_of(holdings, relation=relation, key=key, extra=extra, start=start, end=end)
    models = gpu_models({h.gpu_id for h in holdings})
    result = {}
    for pk, per_gpu in usage.items():
        known = sorted(models[g.gpu_id] for g in per_gpu if g.gpu_id in models)
        eff = summarize(per_gpu, memory_total_mib=min(m for _, m in known) if known else None)
        eff.gpu_model = known[0][0] if known else None
        result[pk] = eff
    return result


def jobs_efficiency(jobs, *, start=None, end: datetime) -> dict[int, Efficiency]:
    return efficiency_by_key(
        job_holdings(jobs, now=end),
        relation="job_allocations",
        key="job_id",
        start=start,
        end=end,
    )


def bookings_efficiency(reservations, *, start=None, end: datetime) -> dict[int, Efficiency]:
    return efficiency_by_key(
        booking_holdings(reservations),
        relation="holdings",
        key="reservation_id",
        extra=Q(gpu__holdings__active=True),
        start=start,
        end=end,
    )


def _in_use_now(team_ids, *, now: datetime) -> dict[tuple[int, int], int]:
    """GPUs each team holds now per model: running jobs outside bookings, and bookings."""
    used: dict[tuple[int, int], int] = defaultdict(int)
    jobs = (
        allocations_holding_at(now, outside_bookings=True)
        .filter(job__team_id__in=team_ids)
        .values_list("job__team_id", "gpu__model_id")
        .annotate(n=Count("id"))
    )
    bookings = (
        bookings_holding_at(now)
        .filter(reservation__team_id__in=team_ids)
        .values_list("reservation__team_id", "gpu__model_id")
        .annotate(n=Count("id"))
    )
    for team_id, model_id, n in [*jobs, *bookings]:
        used[(team_id, model_id)] += n
    return used


def _quota_rule(team_ids) -> QuotaRule:
    """The teams' quota rows, keyed by team and GPU model ids."""
    return QuotaRule(
        QuotaRow(team_id, model_id, guaranteed, limit)
        for team_id, model_id, guaranteed, limit in Quota.objects.filter(
            team_id__in=team_ids
        ).values_list("team_id", "gpu_model_id", "guaranteed", "limit")
    )


def estimated_costs(jobs, *, now: datetime) -> dict[int, dict]:
    """For waiting jobs outside bookings: the price of its GPUs from now for its maximum runtime
    (`pricing.price_holding`: cut where a rate card starts or ends, energy estimated), the GPUs
    above the team's guarantee (counting what it holds now) at the over-quota price. A job for
    any model is priced at the dearest model it could land on ("up to")."""
    waiting = [j for j in jobs if j.status in WAITING_STATUSES and not j.reservation_id]
    if not waiting:
        return {}
    team_ids = {j.team_id for j in waiting}
    used = _in_use_now(team_ids, now=now)
    held_all: dict[int, int] = defaultdict(int)
    for (team_id, _), n in used.items():
        held_all[team_id] += n
    rule = _quota_rule(team_ids)
    longest = max(j.max_runtime_seconds for j in waiting)
    prices = RateBook(start=now, end=now + timedelta(seconds=longest + 1))
    models = list(GpuModel.objects.values_list("pk", "name"))
    energy: dict[int, Decimal] = {}
    result = {}
    for job in waiting:
        candidates = [(job.gpu_model_id, job.gpu_model.name)] if job.gpu_model_id else models
        best = None
        for model_id, name in candidates:
            # The quota rule: what the team's guarantees leave of it (model row and any-model
            # row alike). A job that does not fit there runs as borrowed work as a whole (the
            # scheduler marks every GPU of it over quota), so metering charges all of its GPUs
            # at the multiplier, and so does the estimate.
            room = rule.room(
                job.team_id,
                model_id,
                used.get((job.team_id, model_id), 0),
                held_all[job.team_id],
                guarantee=True,
            )
            over_gpus = job.gpu_count if job.gpu_count > max(room, 0) else 0
            if not prices.card_at(model_id, now) and not prices.cuts(model_id):
                continue  # never priced: no estimate
            if model_id not in energy:
                energy[model_id] = energy_per_gpu_hour(model_id, now=now)
            cost = price_holding(
                gpu_model=GpuModel(pk=model_id, name=name),
                count=job.gpu_count,
                start=now,
                end=now + timedelta(seconds=job.max_runtime_seconds),
                over_quota_gpus=over_gpus,
                rates=prices,
                kwh_per_gpu_hour=energy[model_id],
            ).total
            if best is None or cost > best[0]:
                best = (cost, over_gpus, name)
        if best is not None:
            result[job.pk] = {
                "estimated_cost": _money(best[0]),
                "estimated_over_quota_gpus": best[1],
                "estimated_gpu_model": best[2],
                "estimated_cost_is_upper_bound": job.gpu_model_id is None,
            }
    return result


def job_figures(*, jobs, now: datetime | None = None, **_) -> dict[int, dict]:
    """Hook `jobs.figures`: efficiency, cost so far (the ledger's charges of the job) and, for
    a waiting job, the estimated cost, per job id."""
    now = now or timezone.now()
    jobs = list(jobs)
    efficiency = jobs_efficiency([j for j in jobs if not j.is_waiting], end=now)
    costs = cost_by_source(source=ChargeSource.JOB, ids=[j.pk for j in jobs])
    estimates = estimated_costs(jobs, now=now)
    figures = {}
    for job in jobs:
        eff = efficiency.get(job.pk)
        figures[job.pk] = {
            "efficiency": eff.as_dict() if eff else None,
            # A job inside a booking is paid by the booking's charge.
            "cost": None if job.reservation_id else _money(costs.get(job.pk, Decimal(0))),
            "currency": settings.BILLING_CURRENCY,
            **estimates.get(job.pk, {}),
        }
    return figures


def reservation_figures(*, reservations, now: datetime | None = None, **_) -> dict[int, dict]:
    """Hook `reservations.figures`: efficiency and cost so far of each booking."""
    now = now or timezone.now()
    started = [r for r in reservations if r.start <= now]
    # A booking made for later (every new one, on the booking path) has no figures yet.
    efficiency = bookings_efficiency(started, end=now) if started else {}
    costs = cost_by_source(source=ChargeSource.RESERVATION, ids=[r.pk for r in reservations])
    return {
        r.pk: {
            "efficiency": efficiency[r.pk].as_dict() if r.pk in efficiency else None,
            "cost": _money(costs.get(r.pk, Decimal(0))),
            "currency": settings.BILLING_CURRENCY,
        }
        for r in reservations
    }


def window_bounds(days: int | None = None, *, now: datetime | None = None):
    now = now or timezone.now()
    return now - timedelta(days=days or settings.EFFICIENCY_WINDOW_DAYS), now


def stored_efficiency(kind: str, objects, *, start: datetime, end: datetime):
    """Stored summaries of the ended allocations that lie wholly inside [start, end) (the rest
    is summed live: still running, not summed yet, or cut by the window)."""
    rows = AllocationSummary.objects.filter(
        kind=kind, source_id__in=[o.pk for o in objects], start__gte=start, end__lte=end
    ).values_list("source_id", "figures")
    return {pk: Efficiency.from_dict(figures) for pk, figures in rows}


def efficiency_of(kind: str, objects, *, start: datetime, end: datetime, live):
    """Stored summaries where they hold, the rest summed live by `live`."""
    figures = stored_efficiency(kind, objects, start=start, end=end)
    rest = [o for o in objects if o.pk not in figures]
    figures.update(live(rest, start=start, end=end))
    return figures


def jobs_in_window(*, start: datetime, end: datetime):
    """Jobs that held GPUs at some point of [start, end)."""
    held = allocations_holding(start, end).filter(job=OuterRef("pk"))
    return Job.objects.filter(Exists(held))


def bookings_in_window(*, start: datetime, end: datetime):
    """Bookings that held GPUs at some point of [start, end). A booking's holdings lie inside
    its own window, so the (indexed) booking window narrows the search first."""
    end = min(end, timezone.now())
    held = bookings_holding(start, end).filter(reservation=OuterRef("pk"))
    return Reservation.objects.filter(start__lt=end, end__gt=start).filter(Exists(held))


def member_figures(*, team, start: datetime | None = None, end: datetime | None = None, **_):
    """Hook `teams.member_figures`: per user of the team, over the window (default the last
    EFFICIENCY_WINDOW_DAYS), GPU-hours held and busy by their jobs and bookings together, and
    their average activity. Keyed by user id."""
    if start is None or end is None:
        start, end = window_bounds()
    jobs = list(
        jobs_in_window(start=start, end=end)
        .filter(team=team)
        .only("pk", "submitted_by_id")
        .prefetch_related("allocations")
    )
    bookings = list(
        bookings_in_window(start=start, end=end).filter(team=team).only("pk", "created_by_id")
    )
    job_user = {j.pk: j.submitted_by_id for j in jobs}
    booking_user = {b.pk: b.created_by_id for b in bookings}
    per_user: dict[int, list[Efficiency]] = defaultdict(list)
    for pk, eff in efficiency_of(
        AllocationKind.JOB, jobs, start=start, end=end, live=jobs_efficiency
    ).items():
        per_user[job_user[pk]].append(eff)
    for pk, eff in efficiency_of(
        AllocationKind.BOOKING, bookings, start=start, end=end, live=bookings_efficiency
    ).items():
        per_user[booking_user[pk]].append(eff)
    return {user_id: _combine(effs) for user_id, effs in per_user.items()}


def _combine(effs: list[Efficiency]) -> dict:
    held = sum(e.gpu_hours for e in effs)
    busy = sum(e.busy_gpu_hours for e in effs)
    weighted = [
        (e.activity_percent, e.telemetry_minutes, e.activity_signal)
        for e in effs
        if e.activity_percent is not None
    ]
    minutes = sum(m for _, m, _ in weighted)
    signals = {s for _, _, s in weighted}
    return {
        "allocations": len(effs),
        "gpu_hours": round(held, 2),
        "busy_gpu_hours": round(busy, 2),
        "busy_percent": round(100 * busy / held, 1) if held else None,
        "activity_percent": round(sum(a * m for a, m, _ in weighted) / minutes, 1)
        if minutes
        else None,
        "activity_signal": signals.pop() if len(signals) == 1 else ("mixed" if signals else None),
        "idle_gpu_hours": round(sum(e.idle_gpu_hours for e in effs), 2),
    }
