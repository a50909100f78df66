"""Per-GPU minute and hour rollups of raw samples, attributed to the team holding the GPU.

Idempotent upserts: re-running any interval rewrites the same rows. PostgreSQL computes them in
one INSERT ... SELECT; other databases (the SQLite demo) use the portable Python path, which
the tests hold to the same numbers.

Energy is the sum of positive steps of the NVML energy counter between consecutive samples
(a step counts toward the bucket of its later sample), so nothing is lost at bucket edges; a
counter reset (negative step) is skipped.
"""

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction

from apps.reservations.holdings import HOLDING_TEAM_AT_SQL, bookings_holding, holds_at
from apps.telemetry.activity import busy_sample_sql, sample_is_busy
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup, GpuSample, LateSampleRange
from portal import hooks

LOOKBACK = timedelta(minutes=5)  # how far before an interval to look for the previous sample
ROLLUP_FIELDS = [
    "team",
    "samples",
    "util_avg",
    "util_max",
    "mem_used_avg_mib",
    "mem_used_max_mib",
    "power_avg_w",
    "energy_j",
    "busy_seconds",
    "sm_active_avg",
    "sm_occupancy_avg",
    "tensor_active_avg",
    "dram_bw_avg",
]

# A minute whose stored rollup has the figures its samples give now and the team holding it now
# is not recomputed. The minutely run covers the last ROLLUP_WINDOW every minute although only
# the newest minutes get samples, and the energy steps (a window over each GPU's samples since
# the look-back, sorted) were most of its cost: they are taken only from each GPU's first changed
# minute on (a new sample changes the step into the minutes after it too).
MINUTE_SQL = """
WITH counted AS (
    SELECT gpu_id, date_trunc('minute', ts) AS bucket, count(*) AS samples,
           avg(util_gpu)::float8 AS util_avg, max(util_gpu) AS util_max,
           avg(mem_used_mib)::float8 AS mem_avg, max(mem_used_mib) AS mem_max,
           avg(power_w)::float8 AS power_avg,
           (60.0 * count(*) FILTER (WHERE {busy_sample}) / count(*))::float8 AS busy_seconds,
           avg(sm_active)::float8 AS sm_active_avg, avg(sm_occupancy)::float8 AS sm_occupancy_avg,
           avg(tensor_active)::float8 AS tensor_active_avg,
           avg(dram_bw_util)::float8 AS dram_bw_avg
    FROM telemetry_gpusample
    WHERE ts >= %(start)s AND ts < %(end)s
    GROUP BY gpu_id, date_trunc('minute', ts)
), redo AS (
    SELECT c.gpu_id, min(c.bucket) AS since
    FROM counted c
    LEFT JOIN telemetry_gpuminuterollup r
        ON r.gpu_id = c.gpu_id AND r.bucket = c.bucket
        AND r.bucket >= %(start)s AND r.bucket < %(end)s
    WHERE (r.samples, r.util_avg, r.util_max, r.mem_used_avg_mib, r.mem_used_max_mib,
           r.power_avg_w, r.busy_seconds, r.sm_active_avg, r.sm_occupancy_avg,
           r.tensor_active_avg, r.dram_bw_avg)
          IS DISTINCT FROM
          (c.samples, c.util_avg, c.util_max, c.mem_avg, c.mem_max, c.power_avg,
           c.busy_seconds, c.sm_active_avg, c.sm_occupancy_avg, c.tensor_active_avg,
           c.dram_bw_avg)
       OR r.team_id IS DISTINCT FROM {counted_team}
    GROUP BY c.gpu_id
), s AS (
    SELECT t.gpu_id, t.ts,
           t.energy_mj - CASE
               WHEN lag(t.ts) OVER w IS NOT NULL THEN lag(t.energy_mj) OVER w
               -- the GPU's sample before its first recomputed one, as far back as the look-back
               ELSE (SELECT p.energy_mj FROM telemetry_gpusample p
                     WHERE p.gpu_id = t.gpu_id AND p.ts < t.ts AND p.ts >= %(lookback)s
                     ORDER BY p.ts DESC LIMIT 1)
           END AS step_mj
    FROM telemetry_gpusample t JOIN redo ON redo.gpu_id = t.gpu_id
    WHERE t.ts >= %(start)s AND t.ts < %(end)s AND t.ts >= redo.since
    WINDOW w AS (PARTITION BY t.gpu_id ORDER BY t.ts)
), energy AS (
    SELECT gpu_id, date_trunc('minute', ts) AS bucket,
           sum(step_mj) FILTER (WHERE step_mj >= 0) / 1000.0 AS energy_j
    FROM s
    GROUP BY gpu_id, date_trunc('minute', ts)
)
INSERT INTO telemetry_gpuminuterollup
    (gpu_id, bucket, team_id, samples, util_avg, util_max, mem_used_avg_mib, mem_used_max_mib,
     power_avg_w, energy_j, busy_seconds, sm_active_avg, sm_occupancy_avg, tensor_active_avg,
     dram_bw_avg)
SELECT g.gpu_id, g.bucket,
       {holding_team},
       g.samples, g.util_avg, g.util_max, g.mem_avg, g.mem_max, g.power_avg, e.energy_j,
       g.busy_seconds, g.sm_active_avg, g.sm_occupancy_avg, g.tensor_active_avg, g.dram_bw_avg
FROM counted g
JOIN redo ON redo.gpu_id = g.gpu_id AND g.bucket >= redo.since
JOIN energy e ON e.gpu_id = g.gpu_id AND e.bucket = g.bucket
ON CONFLICT (gpu_id, bucket) DO UPDATE SET
    team_id = EXCLUDED.team_id, samples = EXCLUDED.samples, util_avg = EXCLUDED.util_avg,
    util_max = EXCLUDED.util_max, mem_used_avg_mib = EXCLUDED.mem_used_avg_mib,
    mem_used_max_mib = EXCLUDED.mem_used_max_mib, power_avg_w = EXCLUDED.power_avg_w,
    energy_j = EXCLUDED.energy_j, busy_seconds = EXCLUDED.busy_seconds,
    sm_active_avg = EXCLUDED.sm_active_avg, sm_occupancy_avg = EXCLUDED.sm_occupancy_avg,
    tensor_active_avg = EXCLUDED.tensor_active_avg, dram_bw_avg = EXCLUDED.dram_bw_avg
"""

HOUR_SQL = """
WITH grouped AS (
    SELECT m.gpu_id, date_trunc('hour', m.bucket) AS hour, sum(m.samples) AS samples,
           sum(m.util_avg * m.samples)
               / nullif(sum(m.samples) FILTER (WHERE m.util_avg IS NOT NULL), 0) AS util_avg,
           max(m.util_max) AS util_max,
           sum(m.mem_used_avg_mib * m.samples)
               / nullif(sum(m.samples) FILTER (WHERE m.mem_used_avg_mib IS NOT NULL), 0) AS mem_avg,
           max(m.mem_used_max_mib) AS mem_max,
           sum(m.power_avg_w * m.samples)
               / nullif(sum(m.samples) FILTER (WHERE m.power_avg_w IS NOT NULL), 0) AS power_avg,
           sum(m.energy_j) AS energy_j, sum(m.busy_seconds) AS busy_seconds,
           sum(m.sm_active_avg * m.samples)
               / nullif(sum(m.samples) FILTER (WHERE m.sm_active_avg IS NOT NULL), 0)
               AS sm_active_avg,
           sum(m.sm_occupancy_avg * m.samples)
               / nullif(sum(m.samples) FILTER (WHERE m.sm_occupancy_avg IS NOT NULL), 0)
               AS sm_occupancy_avg,
           sum(m.tensor_active_avg * m.samples)
               / nullif(sum(m.samples) FILTER (WHERE m.tensor_active_avg IS NOT NULL), 0)
               AS tensor_active_avg,
           sum(m.dram_bw_avg * m.samples)
               / nullif(sum(m.samples) FILTER (WHERE m.dram_bw_avg IS NOT NULL), 0) AS dram_bw_avg
    FROM telemetry_gpuminuterollup m
    WHERE m.bucket >= %(start)s AND m.bucket < %(end)s
    GROUP BY m.gpu_id, date_trunc('hour', m.bucket)
)
INSERT INTO telemetry_gpuhourrollup
    (gpu_id, bucket, team_id, samples, util_avg, util_max, mem_used_avg_mib, mem_used_max_mib,
     power_avg_w, energy_j, busy_seconds, sm_active_avg, sm_occupancy_avg, tensor_active_avg,
     dram_bw_avg)
SELECT g.gpu_id, g.hour,
       (SELECT m2.team_id FROM telemetry_gpuminuterollup m2
        WHERE m2.gpu_id = g.gpu_id
          AND m2.bucket >= g.hour AND m2.bucket < g.hour + interval '1 hour'
        GROUP BY m2.team_id ORDER BY count(*) DESC, m2.team_id LIMIT 1),
       g.samples, g.util_avg, g.util_max, g.mem_avg, g.mem_max, g.power_avg, g.energy_j,
       g.busy_seconds, g.sm_active_avg, g.sm_occupancy_avg, g.tensor_active_avg, g.dram_bw_avg
FROM grouped g
ON CONFLICT (gpu_id, bucket) DO UPDATE SET
    team_id = EXCLUDED.team_id, samples = EXCLUDED.samples, util_avg = EXCLUDED.util_avg,
    util_max = EXCLUDED.util_max, mem_used_avg_mib = EXCLUDED.mem_used_avg_mib,
    mem_used_max_mib = EXCLUDED.mem_used_max_mib, power_avg_w = EXCLUDED.power_avg_w,
    energy_j = EXCLUDED.energy_j, busy_seconds = EXCLUDED.busy_seconds,
    sm_active_avg = EXCLUDED.sm_active_avg, sm_occupancy_avg = EXCLUDED.sm_occupancy_avg,
    tensor_active_avg = EXCLUDED.tensor_active_avg, dram_bw_avg = EXCLUDED.dram_bw_avg
"""


# Per (hour, team, GPU model) sums of the hour rollups: the same SQL on PostgreSQL and SQLite.
TEAM_MODEL_SQL = """
INSERT INTO telemetry_teammodelhourrollup
    (bucket, team_id, gpu_model_id, gpu_hours, samples, busy_seconds, energy_j, util_sum, util_n,
     mem_used_sum_mib, mem_used_n, mem_used_max_mib, sm_active_sum, sm_active_n,
     sm_occupancy_sum, sm_occupancy_n, tensor_active_sum, tensor_active_n, dram_bw_sum, dram_bw_n)
SELECT h.bucket, h.team_id, g.model_id, count(*), sum(h.samples), sum(h.busy_seconds),
       sum(h.energy_j), sum(h.util_avg), count(h.util_avg), sum(h.mem_used_avg_mib),
       count(h.mem_used_avg_mib), max(h.mem_used_max_mib), sum(h.sm_active_avg),
       count(h.sm_active_avg), sum(h.sm_occupancy_avg), count(h.sm_occupancy_avg),
       sum(h.tensor_active_avg), count(h.tensor_active_avg), sum(h.dram_bw_avg),
       count(h.dram_bw_avg)
FROM telemetry_gpuhourrollup h JOIN fleet_gpu g ON g.id = h.gpu_id
WHERE h.bucket >= %s AND h.bucket < %s
GROUP BY h.bucket, h.team_id, g.model_id
"""


def rollup_team_models(*, start: datetime, end: datetime) -> None:
    """Rewrite the (hour, team, GPU model) sums (TeamModelHourRollup) of the hours in
    [start, end) from the hour rollups: delete and insert, so a group that vanished (a team
    re-attributed by late samples) goes too. rollup_hours calls it in its own transaction;
    call it directly only after writing hour rollups some other way (demo and bench data)."""
    # adapted as the ORM stores them (SQLite compares datetimes as text)
    bounds = [connection.ops.adapt_datetimefield_value(moment) for moment in (start, end)]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM telemetry_teammodelhourrollup WHERE bucket >= %s AND bucket < %s",
            bounds,
        )
        cursor.execute(TEAM_MODEL_SQL, bounds)


# The minutely task rolls up this much of the recent past on every run. A sample stored when
# its minute is about to leave that window (LATE_AFTER) is noted, and its minutes and hours are
# rolled up again by `rollup_late` (an agent flushing its buffer after a broker outage).
ROLLUP_WINDOW = timedelta(minutes=5)
LATE_AFTER = ROLLUP_WINDOW - timedelta(minutes=2)
LATE_RANGES_PER_RUN = 100


def late_rollups_note(*, rows: list[tuple], now: datetime) -> None:
    """Note the span of stored sample rows (gpu_id, ts, ...) that the regular rollup window
    has passed or is about to pass."""
    late = [row[1] for row in rows if row[1] < now - LATE_AFTER]
    if late:
        minute = timedelta(minutes=1)
        LateSampleRange.objects.create(
            start=_floor(min(late), minute), end=_floor(max(late), minute) + minute
        )


def rollup_late(*, limit: int = LATE_RANGES_PER_RUN) -> dict[str, int]:
    """Roll up again the minutes and hours that late samples fell into (oldest noted first),
    tell the apps above (event `telemetry.hours_rolled_up_again`, billing re-meters those
    hours), then forget those notes. Idempotent: rollups are upserts recomputed from the samples."""
    ranges = list(LateSampleRange.objects.order_by("start")[:limit])
    merged: list[list[datetime]] = []
    for item in ranges:
        if merged and item.start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], item.end)
        else:
            merged.append([item.start, item.end])
    minutes = hours = 0
    for start, end in merged:
        minutes += rollup_minutes(start=start, end=end)
        hours += rollup_hours(start=start, end=end)
        # Billing may have charged these hours already: it re-meters them on its next run.
        hooks.emit("telemetry.hours_rolled_up_again", start=start, end=end)
    LateSampleRange.objects.filter(pk__in=[item.pk for item in ranges]).delete()
    return {"ranges": len(merged), "minutes": minutes, "hours": hours}


def _floor(moment: datetime, unit: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((moment - epoch) // unit) * unit


def rollup_minutes(*, start: datetime, end: datetime, portable: bool | None = None) -> int:
    """Upsert minute rollups for the whole minutes in [start, end). Returns rows written."""
    start, end = _floor(start, timedelta(minutes=1)), _floor(end, timedelta(minutes=1))
    if end <= start:
        return 0
    if portable is None:
        portable = connection.vendor != "postgresql"
    with transaction.atomic():
        if not portable:
            busy_sample, busy_params = busy_sample_sql()
            with connection.cursor() as cursor:
                cursor.execute(
                    MINUTE_SQL.format(
                        busy_sample=busy_sample,
                        # a minute is charged to the team whose booking holds it at its start
                        holding_team=HOLDING_TEAM_AT_SQL.format(
                            gpu_id="g.gpu_id", moment="g.bucket"
                        ),
                        counted_team=HOLDING_TEAM_AT_SQL.format(
                            gpu_id="c.gpu_id", moment="c.bucket"
                        ),
                    ),
                    {"start": start, "end": end, "lookback": start - LOOKBACK, **busy_params},
                )
                return cursor.rowcount
        return _upsert(GpuMinuteRollup, _portable_minutes(start, end))


def _upsert(model, rows: list) -> int:
    model.objects.bulk_create(
        rows,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["gpu", "bucket"],
        update_fields=ROLLUP_FIELDS,
    )
    return len(rows)


def _holders(start: datetime, end: datetime) -> dict[int, list[tuple[datetime, datetime, int]]]:
    holders: dict[int, list[tuple[datetime, datetime, int]]] = defaultdict(list)
    for gpu_id, s, e, team_id in bookings_holding(start, end).values_list(
        "gpu_id", "start", "end", "reservation__team_id"
    ):
        holders[gpu_id].append((s, e, team_id))
    return holders


def _team_at(holders, gpu_id: int, moment: datetime) -> int | None:
    return next((team for s, e, team in holders.get(gpu_id, ()) if holds_at(s, e, moment)), None)


GPM_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_bw_util")
GPM_AVERAGES = ("sm_active_avg", "sm_occupancy_avg", "tensor_active_avg", "dram_bw_avg")


def _mean(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _portable_minutes(start: datetime, end: datetime) -> list[GpuMinuteRollup]:
    holders = _holders(start, end)
    groups: dict[tuple[int, datetime], list] = defaultdict(list)
    previous: dict[int, int | None] = {}
    samples = (
        GpuSample.objects.filter(ts__gte=start - LOOKBACK, ts__lt=end)
        .order_by("gpu_id", "ts")
        .values_list(
            "gpu_id", "ts", "util_gpu", "mem_used_mib", "power_w", "energy_mj", *GPM_FIELDS
        )
    )
    for gpu_id, ts, util, mem, power, energy, *gpm in samples:
        last = previous.get(gpu_id)
        step = energy - last if energy is not None and last is not None else None
        previous[gpu_id] = energy
        if ts >= start:
            groups[(gpu_id, _floor(ts, timedelta(minutes=1)))].append((util, mem, power, step, gpm))
    return [
        _minute_row(gpu_id, bucket, items, _team_at(holders, gpu_id, bucket))
        for (gpu_id, bucket), items in groups.items()
    ]


def _minute_row(gpu_id: int, bucket: datetime, items: list, team_id: int | None):
    utils = [u for u, _, _, _, _ in items if u is not None]
    mems = [m for _, m, _, _, _ in items if m is not None]
    steps = [s for _, _, _, s, _ in items if s is not None and s >= 0]
    busy = sum(1 for util, _, _, _, gpm in items if sample_is_busy(util, gpm[0]))
    return GpuMinuteRollup(
        gpu_id=gpu_id,
        bucket=bucket,
        team_id=team_id,
        samples=len(items),
        util_avg=_mean(utils),
        util_max=max(utils) if utils else None,
        mem_used_avg_mib=_mean(mems),
        mem_used_max_mib=max(mems) if mems else None,
        power_avg_w=_mean([p for _, _, p, _, _ in items]),
        energy_j=sum(steps) / 1000.0 if steps else None,
        busy_seconds=60.0 * busy / len(items),
        **{
            name: _mean([gpm[index] for _, _, _, _, gpm in items])
            for index, name in enumerate(GPM_AVERAGES)
        },
    )


def rollup_hours(*, start: datetime, end: datetime, portable: bool | None = None) -> int:
    """Upsert hour rollups from the minute rollups of the whole hours touching [start, end),
    and rewrite their (hour, team, GPU model) sums (TeamModelHourRollup) in the same
    transaction."""
    start = _floor(start, timedelta(hours=1))
    end = _floor(end - timedelta(microseconds=1), timedelta(hours=1)) + timedelta(hours=1)
    if portable is None:
        portable = connection.vendor != "postgresql"
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # One writer of the hours at a time (the minutely run, a late re-rollup): taken
            # first, so two runs over the same hours cannot deadlock or insert a group twice.
            # Readers are not blocked.
            with connection.cursor() as cursor:
                cursor.execute("LOCK TABLE telemetry_teammodelhourrollup IN EXCLUSIVE MODE")
        if not portable:
            with connection.cursor() as cursor:
                cursor.execute(HOUR_SQL, {"start": start, "end": end})
                written = cursor.rowcount
        else:
            written = _upsert(GpuHourRollup, _portable_hours(start, end))
        rollup_team_models(start=start, end=end)
        return written


def _weighted(items, index: int) -> float | None:
    pairs = [(row[index], row[0]) for row in items if row[index] is not None]
    weight = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / weight if weight else None


def _portable_hours(start: datetime, end: datetime) -> list[GpuHourRollup]:
    groups: dict[tuple[int, datetime], list] = defaultdict(list)
    minutes = GpuMinuteRollup.objects.filter(bucket__gte=start, bucket__lt=end).values_list(
        "gpu_id",
        "bucket",
        "samples",
        "util_avg",
        "util_max",
        "mem_used_avg_mib",
        "mem_used_max_mib",
        "power_avg_w",
        "energy_j",
        "busy_seconds",
        "team_id",
        *GPM_AVERAGES,
    )
    for gpu_id, bucket, *values in minutes:
        groups[(gpu_id, _floor(bucket, timedelta(hours=1)))].append(values)
    return [_hour_row(gpu_id, hour, items) for (gpu_id, hour), items in groups.items()]


def _hour_row(gpu_id: int, hour: datetime, items: list) -> GpuHourRollup:
    teams: dict[int | None, int] = defaultdict(int)
    for item in items:
        teams[item[8]] += 1
    team_id = sorted(teams.items(), key=lambda kv: (-kv[1], kv[0] is None, kv[0] or 0))[0][0]
    maxima = [i[2] for i in items if i[2] is not None]
    mem_maxima = [i[4] for i in items if i[4] is not None]
    energies = [i[6] for i in items if i[6] is not None]
    return GpuHourRollup(
        gpu_id=gpu_id,
        bucket=hour,
        team_id=team_id,
        samples=sum(i[0] for i in items),
        util_avg=_weighted(items, 1),
        util_max=max(maxima) if maxima else None,
        mem_used_avg_mib=_weighted(items, 3),
        mem_used_max_mib=max(mem_maxima) if mem_maxima else None,
        power_avg_w=_weighted(items, 5),
        energy_j=sum(energies) if energies else None,
        busy_seconds=sum(i[7] for i in items),
        **{name: _weighted(items, 9 + index) for index, name in enumerate(GPM_AVERAGES)},
    )
