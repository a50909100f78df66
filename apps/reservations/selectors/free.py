"""Reads of what is free: schedulable GPUs, busy intervals, bookable slots, free capacity."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import BigIntegerField, Exists, Func, OuterRef
from django.utils import timezone

from apps.fleet.models import Gpu, GpuModel, MaintenanceWindow
from apps.fleet.selectors import node_power_ready_times
from apps.reservations import availability
from apps.reservations.availability import GpuInfo, Interval
from apps.reservations.holdings import (
    GPU_HOLDINGS_SQL,
    bookings_holding,
    gpu_booked_q,
    held_outside_bookings,
)
from apps.reservations.policy import BookingPolicy
from apps.reservations.selectors.quota import rule_holdings, team_quota_blocked
from apps.teams.models import Team
from apps.teams.selectors import team_quota_rule


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
        gpus = gpus.exclude(gpu_booked_q(free_from, free_until)).exclude(
            Exists(
                MaintenanceWindow.objects.filter(
                    node=OuterRef("node"), start__lt=free_until, end__gt=free_from
                )
            )
        )
        # GPUs of running jobs (outside reservations) until their maximum runtime ends.
        held = {
            gpu_id
            for gpu_id, _, _ in held_outside_bookings(
                start=free_from, end=free_until, gpu_model=gpu_model
            )
        }
        if held:
            gpus = gpus.exclude(id__in=held)
    rows = _fetch_rows(gpus.values_list("id", "node__hostname", "index", "nvlink_domain", "uuid"))
    return [GpuInfo(host, index, pk, domain or "", uuid) for pk, host, index, domain, uuid in rows]


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
    several times faster than loading datetimes. Rounds down (start) or up (end).

    On PostgreSQL through `date_part` (a float8): EXTRACT returns a numeric there, several
    times slower on the tens of thousands of rows the search reads. The float is exact enough:
    microseconds since the epoch fit its 53 bits, and a fraction of one microsecond stays
    clear of the whole second below or above it until long after 2200."""

    output_field = BigIntegerField()

    def __init__(self, expression, *, round_up: bool = False):
        self.round_up = round_up
        super().__init__(expression)

    def as_postgresql(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        fn = "CEIL" if self.round_up else "FLOOR"
        return f"{fn}(date_part('epoch', {sql}))::bigint", params

    def as_sqlite(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        whole = f"CAST(strftime('%%s', {sql}) AS INTEGER)"
        if self.round_up:
            fraction = (
                f"(CAST(strftime('%%f', {sql}) AS REAL) > CAST(strftime('%%S', {sql}) AS INTEGER))"
            )
            return f"({whole} + {fraction})", params * 3
        return whole, params


def _maintenance_busy(
    *, start: datetime, end: datetime, gpu_ids=None, gpu_model: GpuModel | None = None
) -> list[tuple[int, int, int]]:
    """(gpu_id, start_s, end_s): maintenance windows make every GPU of their node busy."""
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
    return _fetch_rows(windows)


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
    rows = bookings_holding(start, end, gpu_ids=gpu_ids)
    if starting_from is not None:
        rows = rows.filter(start__gte=starting_from)
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
    for gpu_id, s, e in _maintenance_busy(
        start=start, end=end, gpu_ids=gpu_ids, gpu_model=gpu_model
    ):
        busy[gpu_id].append((s, e))
    # Running jobs outside reservations hold their GPUs until their maximum runtime ends.
    for gpu_id, s, e in held_outside_bookings(
        start=start, end=end, gpu_ids=gpu_ids, gpu_model=gpu_model
    ):
        busy[gpu_id].append((s, e))
    return busy


# The free gaps between each GPU's booking holdings over a window, for the search: the database
# orders the holdings and keeps only the gaps at least as long as the booking, so the search
# reads a row per such gap and one per GPU (its last end, free from there on), not one per
# holding. Rows (gpu_id, gap_from, gap_until, free_from) in order of time per GPU, in epoch
# seconds: a gap [gap_from, gap_until) before a holding, its start clamped to the window's,
# and/or, on a GPU's last holding, its end (free from there on).
#
# On PostgreSQL each GPU's holdings come in order of their end from the (gpu, end, start) index,
# a range scan per GPU that skips past holdings, with no sort: active holdings of a GPU never
# overlap there (exclusion constraint), so each gap runs from the previous holding's end (which
# lies in the window: every holding read ends after its start), or from the window's start. The
# holdings stay timestamps and only the rows kept become epoch seconds (converting every
# holding was most of the query); a gap's length there errs long by under two seconds, and
# the search drops a gap too short for a grid start anyway.
FREE_GAPS_POSTGRESQL = """
SELECT g.id,
    CEIL(date_part('epoch', COALESCE(x.before, %(start)s)))::bigint,
    FLOOR(date_part('epoch', x.s))::bigint,
    CASE WHEN x.next IS NULL THEN CEIL(date_part('epoch', x.e))::bigint END
FROM fleet_gpu g
CROSS JOIN LATERAL (
    SELECT held.start AS s, held."end" AS e, LAG(held."end") OVER w AS before,
        LEAD(held.start) OVER w AS next
    FROM ({holdings}) held
    WINDOW w AS (ORDER BY held."end")
) x
WHERE g.model_id = %(model)s
    AND (x.next IS NULL OR x.s - COALESCE(x.before, %(start)s) >= %(duration)s)
ORDER BY g.id, x.e
""".replace(
    "{holdings}",
    GPU_HOLDINGS_SQL.format(gpu_id="g.id", start="%(start)s", end="%(end)s"),
)

# Elsewhere (SQLite) over the holdings' (gpu_id, start_s, end_s) query, in epoch seconds, with
# window functions: `before` is the latest end of the GPU's earlier holdings (NULL for its
# first), so overlapping intervals are merged. Parameters: window start (twice), duration.
FREE_GAPS_SQL = """
WITH h (gpu_id, s, e) AS ({holdings}),
ordered AS (
    SELECT gpu_id, s, MAX(e) OVER (
        PARTITION BY gpu_id ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS before
    FROM h
),
gaps (gpu_id, gap_from, gap_until, free_from) AS (
    SELECT gpu_id, CASE WHEN before IS NULL OR before < %s THEN %s ELSE before END, s, NULL
    FROM ordered
    UNION ALL
    SELECT gpu_id, NULL, NULL, MAX(e) FROM h GROUP BY gpu_id
)
SELECT gpu_id, gap_from, gap_until, free_from FROM gaps
WHERE gap_until IS NULL OR gap_until - gap_from >= %s
ORDER BY gpu_id, COALESCE(gap_from, free_from)
"""


def _free_gap_rows(*, gpu_model: GpuModel, duration: int, after: int, until: int) -> list[tuple]:
    start, end = availability.from_epoch(after), availability.from_epoch(until)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                FREE_GAPS_POSTGRESQL,
                {
                    "start": start,
                    "end": end,
                    "duration": timedelta(seconds=duration),
                    "model": gpu_model.pk,
                },
            )
        else:
            holdings = (
                bookings_holding(start, end)
                .filter(gpu__model=gpu_model)
                .annotate(start_s=EpochSeconds("start"), end_s=EpochSeconds("end", round_up=True))
                .values_list("gpu_id", "start_s", "end_s")
                .order_by()
            )
            sql, params = holdings.query.sql_with_params()
            cursor.execute(FREE_GAPS_SQL.format(holdings=sql), (*params, after, after, duration))
        return cursor.fetchall()


def booking_free_starts(
    *, gpu_model: GpuModel, gpu_ids, duration: int, after: int, horizon: int, slot: int
) -> dict[int, list[tuple[int, int]]]:
    """For each of the GPUs (ids of the model), the grid ranges of starts in [after, horizon]
    (on the grid) where no booking holds it for `duration` seconds (`feasible_starts` over
    its bookings alone), read as free gaps rather than holdings."""
    rows = _free_gap_rows(
        gpu_model=gpu_model, duration=duration, after=after, until=horizon + duration
    )
    # Each gap as grid starts, written out rather than called: there are tens of thousands at
    # 10,000 GPUs. A GPU with holdings and no gap long enough has no starts; one without
    # holdings can start any time.
    starts: dict[int, list[tuple[int, int]]] = {}
    for gpu_id, gap_from, gap_until, free_from in rows:
        ranges = starts.get(gpu_id)
        if ranges is None:
            ranges = starts[gpu_id] = []
        if gap_until is not None:
            lo = -(-gap_from // slot) * slot
            hi = min((gap_until - duration) // slot * slot, horizon)
            if lo <= hi:
                ranges.append((lo, hi))
        if free_from is not None:
            lo = -(-free_from // slot) * slot
            if lo <= horizon:
                ranges.append((lo, horizon))
    always = [(after, horizon)]
    return {gpu_id: starts.get(gpu_id, always) for gpu_id in gpu_ids}


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
    span = availability.seconds(duration)
    lookahead = max(INITIAL_LOOKAHEAD, 4 * duration)
    # What makes GPUs busy besides bookings is little: read once up to the farthest end the
    # search may reach, then cut each GPU's free starts by it. Busy intervals past a round's
    # end cannot change that round's starts.
    reach = availability.from_epoch(last) + duration
    other: dict[int, list[Interval]] = defaultdict(list, powered_down_busy(gpus))
    for gpu_id, s, e in [
        *_maintenance_busy(start=after, end=reach, gpu_model=gpu_model),
        *held_outside_bookings(start=after, end=reach, gpu_model=gpu_model),
    ]:
        other[gpu_id].append((s, e))
    gpu_ids = [gpu.id for gpu in gpus]

    def read(start: int, until: int) -> tuple[dict[int, list[tuple[int, int]]], list]:
        """Each GPU's free starts in [start, until] and the windows where `count` can start."""
        shape = {"duration": span, "after": start, "horizon": until, "slot": step}
        starts = booking_free_starts(gpu_model=gpu_model, gpu_ids=gpu_ids, **shape)
        for gpu_id, spans in other.items():
            if gpu_id in starts:
                starts[gpu_id] = availability.intersect_starts(
                    starts[gpu_id], availability.feasible_starts(spans, **shape)
                )
        if blocked:
            # A window no booking may overlap is, for the search, a time every GPU is busy.
            allowed = availability.feasible_starts(sorted(blocked), **shape)
            starts = {
                gpu_id: availability.intersect_starts(ranges, allowed)
                for gpu_id, ranges in starts.items()
            }
        windows = availability.start_windows(
            gpus, starts, count=count, slot=step, same_node=same_node
        )
        return starts, windows

    # Each round of the look-ahead searches [search_from, until]; its windows are those of any
    # read over a longer stretch from search_from, cut at `until` (whether a start works is
    # decided start by start). So the first round reads its own stretch (most searches end
    # there) and a later one reads four rounds' worth at once: one query and one sweep where
    # the rounds took three.
    search_from, read_from, read_until = first, None, None
    starts: dict[int, list[tuple[int, int]]] = {}
    windows: list[tuple[int, int]] = []
    while True:
        until = min(last, availability.floor_to_grid(first + availability.seconds(lookahead), step))
        slots = []
        start = availability.ceil_to_grid(search_from, step)
        if start <= until:
            if read_from is None or start < read_from or until > read_until:
                read_from = start
                ahead = lookahead if read_until is None else 4 * lookahead
                read_until = min(
                    last, availability.floor_to_grid(first + availability.seconds(ahead), step)
                )
                starts, windows = read(read_from, read_until)
            in_round = [
                (max(lo, start), min(hi, until))
                for lo, hi in windows
                if lo <= until and hi >= start
            ][:limit]
            slots = availability.slots_in_windows(
                gpus, starts, in_round, count=count, same_node=same_node
            )
        runs_to_end = bool(slots) and slots[-1].latest_start >= until
        if until >= last or len(slots) >= limit or runs_to_end:
            break
        if not slots:
            # No start up to `until` works: the longer look-ahead searches only the starts
            # after it.
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
    holdings = rule_holdings(rule, team=team, model=gpu_model.name, start=start, end=end)
    return [
        (t, max(0, min(free, rule.room_over(team.slug, gpu_model.name, t, t + bucket, holdings))))
        for t, free in points
    ]
