"""Who holds GPU g over [s, e): the bookings' half of the rule, written once.

A booking holds a GPU through its holding rows (`ReservationGpu`): an *active* row holds its
GPU over [start, end), half-open. The booking's status is not part of the rule: cancelling
or releasing a booking cuts its rows at that moment and deactivates the rows still ahead, and
a booking ends when its rows do, so the rows alone say who held a GPU when, past or future
(metering charges exactly them). A row that ends exactly when a span starts does not hold
in it; a row that starts at a moment holds at that moment.

Running jobs hold GPUs too; `apps.jobs.holdings` adds them on top of this module (jobs sit
above reservations). Every read of "which bookings hold these GPUs then" goes through here.
"""

from datetime import datetime

from django.db.models import Exists, OuterRef, Q, QuerySet

from apps.reservations.models import ReservationGpu
from portal import queries


def overlap_q(
    start: datetime, end: datetime | None, *, prefix: str = "", open_end: bool = False
) -> Q:
    """Rows whose [start, end) overlaps [start, end): each starts before the other ends.
    ``end`` None: from ``start`` on, for ever. ``open_end``: the row's own end may be NULL
    (still running), which holds for ever. ``prefix``: the path to the row (``"holdings__"``)."""
    ends_after = Q(**{f"{prefix}end__gt": start})
    if open_end:
        ends_after |= Q(**{f"{prefix}end__isnull": True})
    if end is None:
        return ends_after
    return ends_after & Q(**{f"{prefix}start__lt": end})


def at_q(moment: datetime, *, prefix: str = "", open_end: bool = False) -> Q:
    """Rows that hold at the instant ``moment``: started at or before it and ending after it."""
    return Q(**{f"{prefix}start__lte": moment}) & overlap_q(
        moment, None, prefix=prefix, open_end=open_end
    )


def bookings_holding(
    start: datetime, end: datetime | None = None, *, gpu_ids=None
) -> QuerySet[ReservationGpu]:
    """Booking holdings of the GPUs (all GPUs if None) over [start, end); from ``start`` on
    when ``end`` is None."""
    rows = ReservationGpu.objects.filter(overlap_q(start, end), active=True)
    if gpu_ids is not None:
        rows = rows.filter(gpu_id__in=gpu_ids)
    return rows


def bookings_by_gpu(*, start: datetime, end: datetime | None, gpu_ids) -> dict[int, set[int]]:
    """The bookings holding each of the GPUs over [start, end) (the `gpus.bookings` query)."""
    found: dict[int, set[int]] = {}
    rows = bookings_holding(start, end, gpu_ids=gpu_ids).values_list("gpu_id", "reservation_id")
    for gpu_id, reservation_id in rows:
        found.setdefault(gpu_id, set()).add(reservation_id)
    return found


def bookings_holding_at(moment: datetime, *, gpu_ids=None) -> QuerySet[ReservationGpu]:
    """Booking holdings of the GPUs (all GPUs if None) at the instant ``moment``."""
    rows = ReservationGpu.objects.filter(at_q(moment), active=True)
    if gpu_ids is not None:
        rows = rows.filter(gpu_id__in=gpu_ids)
    return rows


def gpu_booked_q(start: datetime, end: datetime | None, *, gpu: str = "pk") -> Q:
    """On a `Gpu` queryset (or anything with a GPU id at ``gpu``): some booking holds the GPU
    over [start, end)."""
    return Q(Exists(bookings_holding(start, end).filter(gpu=OuterRef(gpu))))


def held_outside_bookings(
    *, start: datetime, end: datetime, gpu_ids=None, gpu_model=None, team=None
) -> list[tuple[int, int, int]]:
    """(gpu_id, start_s, end_s) of GPUs held by something other than bookings over [start,
    end), by `team` if given: the answers to the `gpus.busy_intervals` query (jobs: running
    jobs outside bookings, until their maximum runtime, `apps.jobs.holdings`). Higher layers
    answer the query; reservations never imports them."""
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


def held_outside_bookings_for(
    *, start: datetime, end: datetime, team, gpu_model
) -> list[tuple[int, int, str, int, int]]:
    """(gpu_id, team_id, gpu_model_name, start_s, end_s) of GPUs held by something other than
    bookings over [start, end) that are `team`'s or of `gpu_model`: what a booking's quota
    count and its pick need, in one read (the `booking.busy_intervals` query)."""
    return [
        interval
        for intervals in queries.ask(
            "booking.busy_intervals", start=start, end=end, team=team, gpu_model=gpu_model
        )
        for interval in intervals
    ]


def holds_at(start: datetime, end: datetime | None, moment: datetime) -> bool:
    """The rule of `at_q` for rows already loaded: [start, end) holds at ``moment`` (an end of
    None: still running)."""
    return start <= moment and (end is None or moment < end)


# The same rule for raw SQL where the ORM costs too much (the booking path's pick): some
# booking holds the GPU over [start, end). Format with the SQL of the GPU id and the bounds;
# the end comes first among its parameters.
GPU_BOOKED_SQL = """EXISTS (
          SELECT 1 FROM reservations_reservationgpu h
          WHERE h.gpu_id = {gpu_id} AND h.active AND h.start < {end} AND h."end" > {start})"""

# The same rule for raw SQL that reads one GPU's holdings over [start, end) as (start, end)
# rows (the availability search, per GPU on PostgreSQL). Format with the SQL of the GPU id and
# the bounds; the end comes first among its parameters.
GPU_HOLDINGS_SQL = """SELECT h.start, h."end" FROM reservations_reservationgpu h
          WHERE h.gpu_id = {gpu_id} AND h.active AND h.start < {end} AND h."end" > {start}"""

# The same rule for booking admission's count of what a team holds, in raw SQL (compiling the
# ORM's query cost more CPU than the rest of the count): the start, end and GPU model of every
# active holding of the team's bookings over [start, end). Parameters: the team's id, the end,
# the start; `TEAM_HOLDINGS_EXCLUDING_SQL` also leaves one booking out (an extension's own).
TEAM_HOLDINGS_SQL = """SELECT h.start, h."end", m.name FROM reservations_reservationgpu h
        JOIN reservations_reservation r ON r.id = h.reservation_id
        JOIN fleet_gpumodel m ON m.id = r.gpu_model_id
        WHERE r.team_id = %s AND h.active AND h.start < %s AND h."end" > %s"""
TEAM_HOLDINGS_EXCLUDING_SQL = TEAM_HOLDINGS_SQL + " AND h.reservation_id <> %s"
# Either read with equal rows counted once: (start, end, GPU model name, how many), as the quota
# rule's holdings take them. A booking's GPUs share their window, as do bookings of one slot, so
# this is a few rows where there would be hundreds, each of whose two datetimes cost more to
# read than the rest of the count. Format with the read's SQL; the same parameters.
COUNTED_HOLDINGS_SQL = """SELECT x.start, x."end", x.name, COUNT(*) FROM ({holdings}) x
        GROUP BY x.start, x."end", x.name"""

# The same rule for the rollups' raw SQL on PostgreSQL: the team whose booking holds the GPU
# at the instant, for a correlated subquery. Format with the SQL of the GPU id and the instant.
HOLDING_TEAM_AT_SQL = """(SELECT r.team_id FROM reservations_reservationgpu h
        JOIN reservations_reservation r ON r.id = h.reservation_id
        WHERE h.gpu_id = {gpu_id} AND h.active AND h.start <= {moment} AND h."end" > {moment}
        LIMIT 1)"""
