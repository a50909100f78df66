"""Reads for reservations: what is free, what a team holds, what a user may see."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import BigIntegerField, Exists, Func, OuterRef, Q, QuerySet
from django.utils import timezone

from apps.fleet.choices import PowerState
from apps.fleet.models import Gpu, GpuModel, MaintenanceWindow
from apps.fleet.selectors import node_power_ready_times
from apps.reservations import availability
from apps.reservations.availability import GpuInfo, Interval
from apps.reservations.choices import OPEN_STATUSES
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.policy import BookingPolicy
from apps.teams.models import Quota, Team
from apps.teams.quota_rule import Holdings, QuotaRow, QuotaRule, Verdict
from apps.teams.selectors import team_quota_rule
from portal import queries


def busy_elsewhere(
    *, start, end, gpu_ids=None, gpu_model=None, team=None
) -> list[tuple[int, int, int]]:
    """(gpu_id, start_s, end_s) of GPUs held by something other than bookings over [start,
    end), by `team` if given: the answers to the `gpus.busy_intervals` query (jobs: running jobs
    outside bookings, until their maximum runtime). Higher layers answer the query;
    reservations never imports them."""
    return [
        interval
        for intervals in queries.ask(
            "gpus.busy_intervals",
            start=start,
            end=end,
            gpu_ids=gpu_ids,
            gpu_model=gpu_model,
            team=team,
        )
        for interval in intervals
    ]


def reservation_list(*, user) -> QuerySet[Reservation]:
    """Reservations of the user's teams (all teams for finance and platform admins)."""
    return Reservation.objects.for_user(user).select_related("team", "gpu_model", "created_by")


def _fetch_rows(queryset) -> list[tuple]:
    """Run a values_list queryset on the cursor directly: for plain columns the ORM's per-row
    converters only cost time, and these reads sit on the booking path."""
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def schedulable_gpus(
    *,
    gpu_model: GpuModel,
    free_from: datetime | None = None,
    free_until: datetime | None = None,
    ready_by: datetime | None = None,
) -> list[GpuInfo]:
    """Schedulable whole GPUs of a model; only those free over [free_from, free_until) if given.
    GPUs of a powered-down node count when it could be woken and ready by `free_from` (or by
    `ready_by`: the caller then keeps them from being offered before `powered_down_busy` ends)."""
    at = ready_by or free_from
    gpus = Gpu.objects.schedulable(at=at).filter(model=gpu_model, mig_parent__isnull=True)
    if free_from is not None and free_until is not None:
        gpus = gpus.exclude(
            Exists(
                ReservationGpu.objects.filter(
                    gpu=OuterRef("pk"), active=True, start__lt=free_until, end__gt=free_from
                )
            )
        ).exclude(
            Exists(
                MaintenanceWindow.objects.filter(
                    node=OuterRef("node"), start__lt=free_until, end__gt=free_from
                )
            )
        )
        # GPUs of running jobs (outside reservations) until their maximum runtime ends.
        held = {
            gpu_id
            for gpu_id, _, _ in busy_elsewhere(start=free_from, end=free_until, gpu_model=gpu_model)
        }
        if held:
            gpus = gpus.exclude(id__in=held)
    rows = _fetch_rows(gpus.values_list("id", "node__hostname", "index", "nvlink_domain", "uuid"))
    return [
        GpuInfo(node=host, index=index, id=pk, nvlink_domain=domain or "", uuid=uuid)
        for pk, host, index, domain, uuid in rows
    ]


def powered_down_busy(gpus: list[GpuInfo], now: datetime | None = None) -> dict[int, list]:
    """GPUs of powered-down nodes are busy from now until their node could be woken and ready
    (its resume time plus the booking margin): a booking may start on them after that."""
    now = now or timezone.now()
    ready = node_power_ready_times(now=now)
    return {
        gpu.id: [(availability.to_epoch(now), availability.to_epoch_ceil(ready[gpu.node]))]
        for gpu in gpus
        if gpu.node in ready
    }


class EpochSeconds(Func):
    """A timestamp as whole seconds since the epoch, computed by the database: loading ints is
    several times faster than loading datetimes. Rounds down (start) or up (end)."""

    output_field = BigIntegerField()

    def __init__(self, expression, *, round_up: bool = False):
        self.round_up = round_up
        super().__init__(expression)

    def as_postgresql(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        fn = "CEIL" if self.round_up else "FLOOR"
        return f"{fn}(EXTRACT(EPOCH FROM {sql}))::bigint", params

    def as_sqlite(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        whole = f"CAST(strftime('%%s', {sql}) AS INTEGER)"
        if self.round_up:
            fraction = (
                f"(CAST(strftime('%%f', {sql}) AS REAL) > CAST(strftime('%%S', {sql}) AS INTEGER))"
            )
            return f"({whole} + {fraction})", params * 3
        return whole, params


def busy_intervals(
    *,
    start: datetime,
    end: datetime,
    gpu_ids=None,
    gpu_model: GpuModel | None = None,
    exclude_reservation_id: int | None = None,
    starting_from: datetime | None = None,
) -> dict[int, list[Interval]]:
    """Active holdings overlapping [start, end), per GPU, as epoch-second intervals, for the
    given GPUs or all GPUs of a model; only those starting at or after `starting_from` if
    given (to extend an earlier load without reading rows twice)."""
    rows = ReservationGpu.objects.filter(active=True, start__lt=end, end__gt=start)
    if starting_from is not None:
        rows = rows.filter(start__gte=starting_from)
    if gpu_ids is not None:
        rows = rows.filter(gpu_id__in=gpu_ids)
    if gpu_model is not None:
        rows = rows.filter(gpu__model=gpu_model)
    if exclude_reservation_id is not None:
        rows = rows.exclude(reservation_id=exclude_reservation_id)
    rows = rows.annotate(
        start_s=EpochSeconds("start"), end_s=EpochSeconds("end", round_up=True)
    ).values_list("gpu_id", "start_s", "end_s")
    busy: dict[int, list[Interval]] = defaultdict(list)
    for gpu_id, s, e in _fetch_rows(rows):
        busy[gpu_id].append((s, e))
    # Maintenance windows make every GPU of their node busy.
    windows = Gpu.objects.filter(
        node__maintenance_windows__start__lt=end, node__maintenance_windows__end__gt=start
    )
    if gpu_ids is not None:
        windows = windows.filter(id__in=gpu_ids)
    if gpu_model is not None:
        windows = windows.filter(model=gpu_model)
    windows = windows.annotate(
        start_s=EpochSeconds("node__maintenance_windows__start"),
        end_s=EpochSeconds("node__maintenance_windows__end", round_up=True),
    ).values_list("id", "start_s", "end_s")
    for gpu_id, s, e in _fetch_rows(windows):
        busy[gpu_id].append((s, e))
    # Running jobs outside reservations hold their GPUs until their maximum runtime ends.
    for gpu_id, s, e in busy_elsewhere(start=start, end=end, gpu_ids=gpu_ids, gpu_model=gpu_model):
        busy[gpu_id].append((s, e))
    return busy


@dataclass(frozen=True)
class BookableSlot:
    start: datetime
    latest_start: datetime
    gpus: tuple[GpuInfo, ...]


INITIAL_LOOKAHEAD = timedelta(days=2)


def availability_search(
    *,
    gpu_model: GpuModel,
    count: int,
    duration: timedelta,
    after: datetime,
    horizon: datetime,
    slot: timedelta,
    same_node: bool = False,
    limit: int = 5,
    blocked: list[Interval] | tuple = (),
) -> list[BookableSlot]:
    """The earliest windows (up to `limit`) where `count` GPUs are free for `duration` (and
    that overlap none of the `blocked` epoch intervals, e.g. where the team's quota is full).

    Looks ahead progressively (2 days, then doubling up to `horizon`) so the common case loads
    a fraction of the bookings. It stops once it has `limit` windows, or at least one window
    that runs to the end of the look-ahead: later windows cannot start before that one ends.
    Such a last window's `latest_start` is then "at least until", which is all callers need.
    """
    gpus = schedulable_gpus(gpu_model=gpu_model, ready_by=horizon)
    step, first = availability.seconds(slot), availability.to_epoch_ceil(after)
    last = availability.floor_to_grid(availability.to_epoch(horizon), step)
    lookahead = max(INITIAL_LOOKAHEAD, 4 * duration)
    busy: dict[int, list[Interval]] = defaultdict(list, powered_down_busy(gpus))
    loaded_until = None
    search_from = first
    while True:
        until = min(last, availability.floor_to_grid(first + availability.seconds(lookahead), step))
        load_end = availability.from_epoch(until) + duration
        more = busy_intervals(
            gpu_model=gpu_model, start=after, end=load_end, starting_from=loaded_until
        )
        for gpu_id, spans in more.items():
            busy[gpu_id].extend(spans)
        loaded_until = load_end
        # A window no booking may overlap is, for the search, a time every GPU is busy.
        with_blocked = (
            {gpu.id: [*busy.get(gpu.id, ()), *blocked] for gpu in gpus} if blocked else busy
        )
        slots = availability.find_slots(
            gpus,
            with_blocked,
            count=count,
            duration=availability.seconds(duration),
            after=search_from,
            horizon=until,
            slot=step,
            same_node=same_node,
            limit=limit,
        )
        runs_to_end = bool(slots) and slots[-1].latest_start >= until
        if until >= last or len(slots) >= limit or runs_to_end:
            break
        if not slots:
            # No start up to `until` works (the bookings are loaded to `until` + duration):
            # the longer look-ahead searches only the starts after it.
            search_from = until + step
        lookahead *= 2
    return [
        BookableSlot(
            start=availability.from_epoch(s.start),
            latest_start=availability.from_epoch(s.latest_start),
            gpus=s.gpus,
        )
        for s in slots
    ]


def slots_from_now(
    *,
    gpu_model: GpuModel,
    count: int,
    duration: timedelta,
    after: datetime | None = None,
    same_node: bool = False,
    limit: int = 5,
    team: Team | None = None,
) -> list[BookableSlot]:
    """Bookable slots under the booking policy: from now (or later) to the advance limit; for
    a `team`, only windows its quota allows too, so a suggested slot never fails on quota."""
    policy = BookingPolicy.from_settings()
    now = timezone.now()
    after = max(after or now, now)
    horizon = now + policy.max_advance
    blocked: list[Interval] = []
    if team is not None:
        blocked = team_quota_blocked(
            team=team, gpu_model=gpu_model, count=count, start=after, end=horizon + duration
        )
    return availability_search(
        gpu_model=gpu_model,
        count=count,
        duration=duration,
        after=after,
        horizon=horizon,
        slot=policy.slot,
        same_node=same_node,
        limit=limit,
        blocked=blocked,
    )


def team_quota_models(*, team: Team) -> list[GpuModel]:
    """GPU models the team may book (a quota with a limit above 0), largest limit first; every
    model when the team has an any-model quota."""
    quotas = list(
        Quota.objects.filter(team=team, limit__gt=0)
        .select_related("gpu_model")
        .order_by("-limit", "gpu_model__name")
    )
    if any(quota.gpu_model_id is None for quota in quotas):
        return list(GpuModel.objects.order_by("name"))
    return [quota.gpu_model for quota in quotas]


def team_quota_blocked(
    *, team: Team, gpu_model: GpuModel, count: int, start: datetime, end: datetime
) -> list[Interval]:
    """Epoch intervals within [start, end) that a new booking of `count` GPUs by `team` may not
    overlap, because the team would then hold more than a limit of its quota: the quota rule
    over its bookings and running jobs, as `services.check_quota` applies it, read without
    locks. No quota at all blocks everything."""
    rule = team_quota_rule(team=team)
    holdings = team_holdings(team=team, start=start, end=end)
    return [
        (availability.to_epoch(s), availability.to_epoch_ceil(e))
        for s, e in rule.full_windows(team.slug, gpu_model.name, count, start, end, holdings)
    ]


def free_capacity(
    *,
    gpu_model: GpuModel,
    start: datetime,
    end: datetime,
    bucket: timedelta,
    team: Team | None = None,
) -> list[tuple[datetime, int]]:
    """GPUs of the model free for the whole of each bucket; for a `team`, no more than the
    team may book there under its quota (the quota rule over its bookings and running jobs)."""
    gpus = schedulable_gpus(gpu_model=gpu_model, ready_by=end)
    busy = busy_intervals(gpu_model=gpu_model, start=start, end=end)
    for gpu_id, spans in powered_down_busy(gpus).items():
        busy.setdefault(gpu_id, []).extend(spans)
    points = [
        (availability.from_epoch(t), free)
        for t, free in availability.free_capacity_timeline(
            gpus,
            busy,
            start=availability.to_epoch(start),
            end=availability.to_epoch(end),
            bucket=availability.seconds(bucket),
        )
    ]
    if team is None:
        return points
    rule = team_quota_rule(team=team)
    holdings = team_holdings(team=team, start=start, end=end)
    return [
        (t, max(0, min(free, rule.room_over(team.slug, gpu_model.name, t, t + bucket, holdings))))
        for t, free in points
    ]


def peak_concurrent(intervals: list[tuple[datetime, datetime, int]]) -> int:
    """Largest sum of counts at any instant over (start, end, count) intervals."""
    events = []
    for s, e, n in intervals:
        events.append((s, n))
        events.append((e, -n))
    peak = current = 0
    for _, delta in sorted(events, key=lambda ev: (ev[0], ev[1])):
        current += delta
        peak = max(peak, current)
    return peak


def team_booked_intervals(
    *,
    team: Team,
    start: datetime,
    end: datetime,
    gpu_model: GpuModel | None = None,
    exclude_reservation_id: int | None = None,
) -> list[tuple[datetime, datetime, int]]:
    """The team's active holdings overlapping [start, end), clipped to it, as (s, e, 1)."""
    rows = ReservationGpu.objects.filter(
        reservation__team=team, active=True, start__lt=end, end__gt=start
    )
    if gpu_model is not None:
        rows = rows.filter(reservation__gpu_model=gpu_model)
    if exclude_reservation_id is not None:
        rows = rows.exclude(reservation_id=exclude_reservation_id)
    return [(max(s, start), min(e, end), 1) for s, e in rows.values_list("start", "end")]


def team_holdings(
    *, team: Team, start: datetime, end: datetime, exclude_reservation_id: int | None = None
) -> Holdings:
    """What the team holds over [start, end), of every model, as the quota rule counts it: its
    bookings' GPUs and its running jobs' GPUs outside bookings (until their maximum runtime)."""
    holdings = Holdings()
    rows = ReservationGpu.objects.filter(
        reservation__team=team, active=True, start__lt=end, end__gt=start
    )
    if exclude_reservation_id is not None:
        rows = rows.exclude(reservation_id=exclude_reservation_id)
    for s, e, model in rows.values_list("start", "end", "reservation__gpu_model__name"):
        holdings.add(team.slug, model, s, e)
    jobs = busy_elsewhere(start=start, end=end, team=team)
    models = dict(
        Gpu.objects.filter(pk__in={gpu_id for gpu_id, _, _ in jobs}).values_list(
            "pk", "model__name"
        )
    )
    for gpu_id, s, e in jobs:
        holdings.add(
            team.slug, models[gpu_id], availability.from_epoch(s), availability.from_epoch(e)
        )
    return holdings


def quota_verdict(
    *,
    team: Team,
    gpu_model: GpuModel,
    count: int,
    start: datetime,
    end: datetime,
    quotas=None,
    exclude_reservation_id: int | None = None,
) -> Verdict:
    """The quota rule's answer for ``count`` more GPUs of ``gpu_model`` over [start, end) on top
    of what the team holds then: admitted or not, and how many are above its guarantee.
    ``quotas``: the rows to apply (booking admission passes them locked); default: read."""
    if quotas is None:
        rule = team_quota_rule(team=team)
    else:
        rule = QuotaRule(
            QuotaRow(team.slug, q.gpu_model.name if q.gpu_model else None, q.guaranteed, q.limit)
            for q in quotas
        )
    holdings = team_holdings(
        team=team, start=start, end=end, exclude_reservation_id=exclude_reservation_id
    )
    return rule.admit(team.slug, gpu_model.name, count, start, end, holdings)


def quota_usage(*, quotas, now: datetime | None = None) -> dict[int, dict]:
    """Per quota (by id): what its team holds in the row's scope (bookings and running jobs,
    as the quota rule counts them) now, and at its peak over the next 7 days. Answers the
    `quota.usage` hook of teams' quota tables."""
    now = now or timezone.now()
    week = now + timedelta(days=7)
    usage = {}
    holdings: dict[int, Holdings] = {}
    for quota in quotas:
        team = quota.team
        if team.pk not in holdings:
            holdings[team.pk] = team_holdings(team=team, start=now, end=week)
        held = holdings[team.pk]
        model = quota.gpu_model.name if quota.gpu_model else None
        usage[quota.pk] = {
            "in_use": held.peak(team.slug, model, now, now + timedelta(seconds=1)),
            "peak_7d": held.peak(team.slug, model, now, week),
        }
    return usage


def open_reservations_on_gpus(*, gpu_ids, now: datetime) -> QuerySet[ReservationGpu]:
    return ReservationGpu.objects.filter(
        Q(gpu_id__in=gpu_ids),
        active=True,
        end__gt=now,
        reservation__status__in=OPEN_STATUSES,
    ).select_related("reservation", "reservation__team", "gpu")


def with_figures(reservations) -> list[Reservation]:
    """The bookings, each with `figures`: what higher apps add through the
    `reservations.figures` hook (efficiency, cost so far), {} when nothing answers; one answer
    per subscriber for the whole list."""
    reservations = list(reservations)
    figures = queries.ask_merged("reservations.figures", reservations=reservations)
    for reservation in reservations:
        reservation.figures = figures.get(reservation.pk, {})
    return reservations


@dataclass(frozen=True)
class HoldingChange:
    """What happened to one of a booking's GPUs when it left service: moved to another GPU
    (`moved`), or stranded on it because no other GPU was free."""

    moved: bool
    gpu: Gpu  # where the booking is now (moved) or the GPU that left service (stranded)
    moved_from: Gpu | None
    at: datetime
    reason: str


def holding_changes(*, reservation: Reservation, now: datetime | None = None) -> dict:
    """The booking's GPUs that left service: `moved` (each to its new GPU) and `stranded`
    (left on a GPU out of service, while the holding lasts and the GPU is still out of
    service for it), and whether any GPU is left in
    service for the rest of the booking (`none_left`)."""
    now = now or timezone.now()
    rows = list(
        ReservationGpu.objects.filter(reservation=reservation, active=True)
        .filter(Q(moved_from__isnull=False) | Q(stranded=True, end__gt=now))
        .select_related("gpu__node", "moved_from__node")
        .order_by("changed_at", "gpu__node__hostname", "gpu__index")
    )
    moved = [
        HoldingChange(True, r.gpu, r.moved_from, r.changed_at, r.change_reason)
        for r in rows
        if r.moved_from_id
    ]
    # A stranded holding is news only while its GPU is still out of service for it: back in
    # service (undrained, the maintenance window cancelled), the booking has it again.
    # A powered-down node still serves its bookings (it is woken for them), unless it failed
    # to power on.
    in_service = set(
        Gpu.objects.in_service()
        .exclude(node__power_state=PowerState.RESUME_FAILED)
        .filter(pk__in=[r.gpu_id for r in rows if r.stranded])
        .values_list("pk", flat=True)
    )
    stranded = [
        HoldingChange(False, r.gpu, None, r.changed_at, r.change_reason)
        for r in rows
        if r.stranded
        and (
            r.gpu_id not in in_service
            or MaintenanceWindow.objects.filter(
                node_id=r.gpu.node_id, start__lt=r.end, end__gt=r.start
            ).exists()
        )
    ]
    none_left = bool(stranded) and not (
        ReservationGpu.objects.filter(reservation=reservation, active=True, end__gt=now)
        .exclude(gpu_id__in=[c.gpu.pk for c in stranded])
        .exists()
    )
    return {"moved": moved, "stranded": stranded, "none_left": none_left}
