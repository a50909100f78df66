"""Idle GPUs: bookings whose GPUs sit unused (warned, then released), and GPUs nobody holds.

Both kinds are kept as intervals so their GPU-hours (and, with billing, their cost) can be
summed per team and model. Decisions use minute rollups, so they need `rollup_minutes` to
have run for the window (the minutely task does both, in that order).
"""

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from apps.fleet.models import Gpu
from apps.jobs.holdings import allocations_holding_at
from apps.reservations.choices import ReservationStatus
from apps.reservations.holdings import bookings_holding, bookings_holding_at
from apps.reservations.models import Reservation
from apps.reservations.services import notify_team, reservation_release
from apps.telemetry.activity import covers, idle_minute_q, idle_threshold_text, window_signal
from apps.telemetry.choices import IdleKind
from apps.telemetry.models import GpuMinuteRollup, IdleHourRollup, IdleInterval, IdleWarning
from portal.formatting import format_when


def _idle_over(gpu_ids: list[int], start: datetime, end: datetime) -> set[str] | None:
    """The signals the GPUs were judged idle on, when every GPU reported for most of
    [start, end) and had no busy minute (`activity`); None when not idle. Missing telemetry is
    never taken for idleness."""
    minutes = max(1, int((end - start).total_seconds() // 60))
    stats = {
        row["gpu_id"]: row
        for row in GpuMinuteRollup.objects.filter(
            gpu_id__in=gpu_ids, bucket__gte=start, bucket__lt=end
        )
        .values("gpu_id")
        .annotate(
            minutes=Count("id"),
            idle_minutes=Count("id", filter=idle_minute_q()),
            gpm_minutes=Count("sm_active_avg"),
        )
    }
    signals = set()
    for gpu_id in gpu_ids:
        row = stats.get(gpu_id)
        if row is None or not covers(row["minutes"], minutes):
            return None
        if row["idle_minutes"] < row["minutes"]:
            return None
        signals.add(window_signal(row["gpm_minutes"]))
    return signals


def idle_bookings_check(*, now: datetime | None = None) -> dict[str, int]:
    """Warn teams whose active bookings sit idle; release those still idle after the grace.

    Idle: no busy minute (`apps.telemetry.activity`) on any GPU of the booking for the last
    IDLE_WINDOW_MINUTES
    (or, for a booking younger than that, since it started, once IDLE_NO_SHOW_MINUTES passed:
    a no-show). Teams with idle reclaim off are never warned or released."""
    now = now or timezone.now()
    window = timedelta(minutes=settings.IDLE_WINDOW_MINUTES)
    no_show = timedelta(minutes=settings.IDLE_NO_SHOW_MINUTES)
    result = {"warned": 0, "released": 0, "cleared": 0}
    active = Reservation.objects.filter(
        status=ReservationStatus.ACTIVE, start__lte=now - min(window, no_show)
    ).select_related("team", "created_by", "gpu_model")
    for reservation in active:
        if not reservation.team.idle_reclaim:
            continue
        since = max(now - window, reservation.start)
        gpu_ids = list(
            bookings_holding(now).filter(reservation=reservation).values_list("gpu_id", flat=True)
        )
        warning = IdleWarning.objects.filter(reservation=reservation).first()
        signals = _idle_over(gpu_ids, since, _minute(now)) if gpu_ids else None
        if signals is None:
            if warning:
                warning.delete()
                result["cleared"] += 1
            continue
        below = idle_threshold_text(signals)
        grace = timedelta(
            minutes=reservation.team.idle_grace_minutes or settings.IDLE_GRACE_MINUTES
        )
        if warning is None:
            with transaction.atomic():
                IdleWarning.objects.create(
                    reservation=reservation,
                    warned_at=now,
                    reason=f"{below} since {format_when(since, 'time')}"[:200],
                )
                notify_team(
                    reservation,
                    f"GPU reservation #{reservation.pk} is idle",
                    partial(_warning_body, reservation, below, since, grace),
                )
            result["warned"] += 1
        elif now - warning.warned_at >= grace:
            reservation_release(
                reservation=reservation,
                reason=f"idle: GPUs at {below} since "
                f"{format_when(since)} and after a warning at "
                f"{format_when(warning.warned_at, 'time')}",
            )
            result["released"] += 1
    return result


def _warning_body(reservation, below: str, since: datetime, grace: timedelta) -> str:
    # Written once per recipient zone (notify_team), so the times are formatted here.
    return (
        f"{reservation} has kept its GPUs at {below} since {format_when(since)}. Unless they "
        f"get busy, it is released in {int(grace.total_seconds() // 60)} minutes so others "
        "can use them.\n"
    )


def _minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def idle_intervals_update(*, now: datetime | None = None) -> dict[str, int]:
    """Extend (or open) the idle intervals with the minute that just ended.

    held_idle: a GPU a booking holds at the minute's start whose last minute had no busy sample
    (`activity.idle_minute_q`, the rule idle reclaim and the idle page use).
    unallocated: a schedulable GPU that neither a booking nor a job holds at the minute's start
    (`apps.jobs.holdings`)."""
    end = _minute(now or timezone.now())
    start = end - timedelta(minutes=1)
    held = {
        gpu_id: (team_id, reservation_id)
        for gpu_id, team_id, reservation_id in bookings_holding_at(start).values_list(
            "gpu_id", "reservation__team_id", "reservation_id"
        )
    }
    idle_minute = set(
        GpuMinuteRollup.objects.filter(idle_minute_q(), bucket=start, gpu_id__in=held).values_list(
            "gpu_id", flat=True
        )
    )
    current: list[tuple[int, str, int | None, int | None]] = [
        (gpu_id, IdleKind.HELD_IDLE, *held[gpu_id]) for gpu_id in idle_minute
    ]
    unallocated = (
        Gpu.objects.schedulable()
        .filter(mig_parent__isnull=True)
        .exclude(id__in=held)
        .exclude(id__in=allocations_holding_at(start).values("gpu_id"))
        .values_list("id", flat=True)
    )
    current += [(gpu_id, IdleKind.UNALLOCATED, None, None) for gpu_id in unallocated]
    counts = {"extended": 0, "opened": 0}
    with transaction.atomic():
        open_now = {
            (i.gpu_id, i.kind, i.reservation_id): i for i in IdleInterval.objects.filter(end=start)
        }
        fresh = []
        for gpu_id, kind, team_id, reservation_id in current:
            interval = open_now.get((gpu_id, kind, reservation_id))
            if interval is not None:
                interval.end = end
                counts["extended"] += 1
            else:
                fresh.append(
                    IdleInterval(
                        gpu_id=gpu_id,
                        kind=kind,
                        team_id=team_id,
                        reservation_id=reservation_id,
                        start=start,
                        end=end,
                    )
                )
        extended = [i for i in open_now.values() if i.end == end]
        IdleInterval.objects.bulk_update(extended, ["end"], batch_size=1000)
        IdleInterval.objects.bulk_create(fresh, batch_size=1000)
        counts["opened"] = len(fresh)
        # The intervals changed only inside this minute: its hour's sums are rewritten.
        idle_hours_rollup(start=start, end=end)
    return counts


HOUR = timedelta(hours=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Each interval's time inside each hour of [start, end) (whole hours), summed per hour, kind,
# team and GPU model, in microseconds. The hours come from each interval's own span, so an
# interval is visited once per hour it touches.
IDLE_HOURS_SQL = """
INSERT INTO telemetry_idlehourrollup (bucket, kind, team_id, gpu_model_id, idle_us)
SELECT h.t, i.kind, i.team_id, g.model_id,
       sum((extract(epoch FROM least(i."end", h.t + interval '1 hour') - greatest(i.start, h.t))
            * 1000000)::bigint)
FROM telemetry_idleinterval i
JOIN fleet_gpu g ON g.id = i.gpu_id
CROSS JOIN LATERAL generate_series(
    greatest(date_trunc('hour', i.start, 'UTC'), %(start)s),
    least(i."end", %(end)s) - interval '1 microsecond',
    interval '1 hour'
) AS h(t)
WHERE i.start < %(end)s AND i."end" > %(start)s AND i."end" > i.start
GROUP BY h.t, i.kind, i.team_id, g.model_id
"""


def _floor(moment: datetime, unit: timedelta) -> datetime:
    return EPOCH + ((moment - EPOCH) // unit) * unit


def idle_hours_rollup(*, start: datetime, end: datetime, portable: bool | None = None) -> int:
    """Rewrite the idle sums (IdleHourRollup) of the whole hours touching [start, end) from the
    idle intervals: delete and insert, so a group that vanished goes too. Returns rows written.
    `idle_intervals_update` calls it for the minute it adds; call it directly after writing
    intervals some other way (demo and bench data)."""
    start = _floor(start, HOUR)
    end = _floor(end - timedelta(microseconds=1), HOUR) + HOUR
    if portable is None:
        portable = connection.vendor != "postgresql"
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # One writer at a time: two runs over the same hour would both delete, then both
            # insert its sums.
            with connection.cursor() as cursor:
                cursor.execute("LOCK TABLE telemetry_idlehourrollup IN EXCLUSIVE MODE")
        IdleHourRollup.objects.filter(bucket__gte=start, bucket__lt=end).delete()
        if not portable:
            with connection.cursor() as cursor:
                cursor.execute(IDLE_HOURS_SQL, {"start": start, "end": end})
                return cursor.rowcount
        sums: dict[tuple, int] = defaultdict(int)
        intervals = IdleInterval.objects.filter(start__lt=end, end__gt=start).values_list(
            "kind", "team_id", "gpu__model_id", "start", "end"
        )
        for kind, team_id, model_id, s, e in intervals:
            s, e = max(s, start), min(e, end)
            if e <= s:
                continue
            hour = _floor(s, HOUR)
            while hour < e:
                sums[(hour, kind, team_id, model_id)] += (min(e, hour + HOUR) - max(s, hour)) // (
                    timedelta(microseconds=1)
                )
                hour += HOUR
        IdleHourRollup.objects.bulk_create(
            [
                IdleHourRollup(
                    bucket=hour, kind=kind, team_id=team_id, gpu_model_id=model_id, idle_us=us
                )
                for (hour, kind, team_id, model_id), us in sums.items()
            ],
            batch_size=1000,
        )
        return len(sums)
