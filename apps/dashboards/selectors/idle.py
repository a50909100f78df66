"""Idle GPU-hours by kind and team, bookings released by idle reclaim, and every GPU's state now."""

from collections import Counter, defaultdict
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, F
from django.utils import timezone

from apps.dashboards.selectors.filters import MAX_POINTS, UNALLOCATED, Filters, floor_to_step
from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus, PowerState
from apps.fleet.models import GpuModel
from apps.fleet.transitions import POWERED_DOWN_STATES
from apps.jobs.holdings import allocations_holding_at
from apps.reservations.choices import ReservationStatus
from apps.reservations.holdings import bookings_holding_at
from apps.reservations.models import Reservation
from apps.teams.models import Team
from apps.telemetry.activity import busy_minute_q, window_signal
from apps.telemetry.choices import IdleKind
from apps.telemetry.models import GpuMinuteRollup
from apps.telemetry.selectors import idle_hours_by_step

POWERED_DOWN = "powered_down"


def idle_hours(filters: Filters) -> dict:
    """Idle GPU-hours per day (per hour for windows up to a day), by kind and team (by unit
    with group=unit: its teams' hours summed). Unallocated
    idle time belongs to no team: only those who see all teams get it. Summed per step, kind,
    team and model in SQL (`idle_hours_by_step`, from the hourly idle sums): a month is a few
    hundred rows whatever the fleet's size."""
    step = timedelta(hours=1) if filters.fine else timedelta(days=1)
    if (filters.end - filters.start) / step > MAX_POINTS:
        step = (filters.end - filters.start) / MAX_POINTS
    origin = floor_to_step(filters.start, datetime(2000, 1, 1, tzinfo=filters.start.tzinfo), step)
    times = []
    t = floor_to_step(filters.start, origin, step)
    while t < filters.end:
        times.append(t)
        t += step
    rows = idle_hours_by_step(
        start=filters.start,
        end=filters.end,
        times=times,
        step=step,
        team_ids=filters.team_ids,
        unallocated=filters.sees_all and not filters.narrowed,
        gpu_model_id=filters.gpu_model.pk if filters.gpu_model else None,
    )
    series: dict[tuple, dict] = defaultdict(lambda: defaultdict(float))
    by_model: dict[tuple, float] = defaultdict(float)
    slugs = {t.pk: t.slug for t in filters.teams}
    model_names = dict(GpuModel.objects.values_list("pk", "name"))
    for moment, kind, team_id, model_id, hours in rows:
        by_model[(kind, model_names[model_id])] += hours
        name = filters.label(slugs[team_id]) if team_id in slugs else UNALLOCATED
        series[(kind, name)][moment] += hours
    return {
        "step": step,
        "times": times,
        "series": {
            key: [round(values.get(t, 0.0), 3) for t in times]
            for key, values in sorted(series.items())
        },
        "by_model": [
            {
                "kind": kind,
                "kind_label": IdleKind(kind).label,
                "model_name": name,
                "gpu_hours": round(hours, 3),
            }
            for (kind, name), hours in sorted(by_model.items())
        ],
    }


def reclaimed(filters: Filters) -> list[Reservation]:
    """Bookings idle reclaim released in the window (their GPUs went back to the pool)."""
    return list(
        Reservation.objects.filter(
            status=ReservationStatus.RELEASED,
            team_id__in=filters.team_ids,
            ended_at__gte=filters.start,
            ended_at__lt=filters.end,
        )
        .select_related("team", "gpu_model")
        .order_by("-ended_at")[:50]
    )


def gpu_states_now(filters: Filters, *, now: datetime | None = None) -> list[dict]:
    """Every GPU (no MIG devices) with its state now: unhealthy, powered_down, busy, held_idle,
    unallocated, and the signal that state is judged on (`signal`: sm_active, util, or ""
    without telemetry). A GPU whose node is powered down to save energy (fleet's
    `POWERED_DOWN_STATES`: not schedulable now, though it can be woken) is `powered_down`, not
    idle and not free capacity, with the node's power state in `power`.
    Held means an open booking or a running job of one of the user's visible teams holds it;
    GPUs held by teams the user cannot see show as `held_other`. A GPU nobody holds is
    unallocated whatever its telemetry says: busy and idle describe what a holder does with
    its GPUs, and load on a GPU nobody holds (a job's last seconds, a stray process) is
    nobody's to pay for.

    The state, holder and recent minutes of every GPU come from one query (`_states`); Python
    only names them. Ten thousand GPUs read as model instances and judged one by one took
    about a second."""
    visible = set(filters.team_ids)
    slugs = dict(Team.objects.filter(pk__in=visible).values_list("pk", "slug"))
    power_labels = {value: str(label).lower() for value, label in PowerState.choices}
    return [
        {
            "gpu_id": pk,
            "node": node,
            "index": index,
            "model": model,
            "state": state,
            "team": slugs.get(holder, ""),
            "signal": window_signal(gpm) if minutes else "",
            "power": power_labels.get(power, str(power).lower()) if state == POWERED_DOWN else "",
        }
        for pk, node, index, model, power, holder, minutes, gpm, state in _states(
            filters, now or timezone.now()
        )
    ]


def gpu_state_counts(filters: Filters, *, now: datetime | None = None) -> dict[str, int]:
    """How many GPUs are in each state of `gpu_states_now` (states with none are missing)."""
    return Counter(row[-1] for row in _states(filters, now or timezone.now()))


# The holder: the team of the booking holding the GPU now, else of a job running on it (a job
# inside a booking runs on the booking's GPUs: the booking names the holder).
STATES_SQL = """
SELECT g.id, n.hostname, g."index", m.name, n.power_state, coalesce(b.team_id, j.team_id),
       a.minutes, a.gpm,
       CASE
           WHEN g.health <> %s OR g.status <> %s OR n.status <> %s THEN 'unhealthy'
           WHEN n.power_state IN ({powered_down}) THEN %s
           WHEN {held_other} THEN 'held_other'
           WHEN coalesce(b.team_id, j.team_id) IS NULL THEN %s
           WHEN a.busy > 0 THEN 'busy'
           ELSE 'held_idle'
       END
FROM fleet_gpu g
JOIN fleet_node n ON n.id = g.node_id
JOIN fleet_gpumodel m ON m.id = g.model_id
LEFT JOIN (SELECT gpu_id, min(team_id) AS team_id FROM ({bookings}) b GROUP BY gpu_id) b
    ON b.gpu_id = g.id
LEFT JOIN (SELECT gpu_id, min(team_id) AS team_id FROM ({jobs}) j GROUP BY gpu_id) j
    ON j.gpu_id = g.id
LEFT JOIN ({activity}) a ON a.gpu_id = g.id
WHERE g.mig_parent_id IS NULL AND g.status <> %s AND n.status <> %s {model}
ORDER BY n.hostname, g."index", g.id
"""


def _states(filters: Filters, now: datetime) -> list[tuple]:
    """(gpu id, node, index, model name, node power state, holding team id, recent minutes,
    minutes with SM activity, state) of the GPUs of `gpu_states_now`, in the fleet's order.
    Minutes are the GPU's minute rollups of the last 5 minutes. Holders and minutes are read
    by the selectors that own them (`bookings_holding_at`, `allocations_holding_at`,
    `busy_minute_q`), joined here as subqueries."""
    bookings = bookings_holding_at(now).values("gpu_id", team_id=F("reservation__team_id"))
    jobs = allocations_holding_at(now).values("gpu_id", team_id=F("job__team_id"))
    activity = (
        GpuMinuteRollup.objects.filter(bucket__gte=now - timedelta(minutes=5))
        .values("gpu_id")
        .annotate(
            minutes=Count("id"),
            busy=Count("id", filter=busy_minute_q()),
            gpm=Count("sm_active_avg"),
        )
    )
    parts = {}
    for name, queryset in (("bookings", bookings), ("jobs", jobs), ("activity", activity)):
        parts[name] = queryset.order_by().query.sql_with_params()
    visible = sorted(set(filters.team_ids))
    holder = "coalesce(b.team_id, j.team_id)"
    held_other = f"{holder} IS NOT NULL"
    if visible:
        held_other += f" AND {holder} NOT IN ({', '.join(['%s'] * len(visible))})"
    sql = STATES_SQL.format(
        powered_down=", ".join(["%s"] * len(POWERED_DOWN_STATES)),
        held_other=held_other,
        model="AND g.model_id = %s" if filters.gpu_model else "",
        **{name: part_sql for name, (part_sql, _) in parts.items()},
    )
    params = [
        GpuHealth.HEALTHY,
        GpuStatus.ACTIVE,
        NodeStatus.UP,
        *sorted(POWERED_DOWN_STATES),
        POWERED_DOWN,
        *visible,
        UNALLOCATED,
        *(p for _, part_params in parts.values() for p in part_params),
        GpuStatus.RETIRED,
        NodeStatus.RETIRED,
        *([filters.gpu_model.pk] if filters.gpu_model else []),
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
