"""Idle GPU-hours by kind and team, bookings released by idle reclaim, and every GPU's state now."""

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Count
from django.utils import timezone

from apps.dashboards.selectors.filters import MAX_POINTS, UNALLOCATED, Filters, floor_to_step
from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus
from apps.fleet.models import Gpu, GpuModel
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
    team and model in SQL (`idle_hours_by_step`): a month of 1,000 GPUs is a few hundred rows."""
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
    nobody's to pay for."""
    now = now or timezone.now()
    gpus = Gpu.objects.filter(mig_parent__isnull=True).select_related("node", "model")
    if filters.gpu_model:
        gpus = gpus.filter(model=filters.gpu_model)
    gpus = list(gpus.exclude(status=GpuStatus.RETIRED).exclude(node__status=NodeStatus.RETIRED))
    holders = dict(bookings_holding_at(now).values_list("gpu_id", "reservation__team_id"))
    running_jobs = allocations_holding_at(now).values_list("gpu_id", "job__team_id")
    for gpu_id, team_id in running_jobs:
        # A job inside a booking runs on the booking's GPUs: the booking names the holder.
        holders.setdefault(gpu_id, team_id)
    recent = now - timedelta(minutes=5)
    activity = {
        row["gpu_id"]: row
        for row in GpuMinuteRollup.objects.filter(bucket__gte=recent)
        .values("gpu_id")
        .annotate(busy=Count("id", filter=busy_minute_q()), gpm_minutes=Count("sm_active_avg"))
    }
    visible = set(filters.team_ids)
    slugs = dict(Team.objects.filter(pk__in=visible).values_list("pk", "slug"))
    result = []
    for gpu in gpus:
        team_id = holders.get(gpu.pk)
        if (
            gpu.health != GpuHealth.HEALTHY
            or gpu.status != GpuStatus.ACTIVE
            or gpu.node.status != NodeStatus.UP
        ):
            state = "unhealthy"
        elif gpu.node.power_state in POWERED_DOWN_STATES:
            state = POWERED_DOWN
        elif team_id is not None and team_id not in visible:
            state = "held_other"
        elif team_id is None:
            state = UNALLOCATED
        elif (activity.get(gpu.pk) or {}).get("busy"):
            state = "busy"
        else:
            state = "held_idle"
        result.append(
            {
                "gpu": gpu,
                "node": gpu.node.hostname,
                "index": gpu.index,
                "model": gpu.model.name,
                "state": state,
                "team": slugs.get(team_id, ""),
                "signal": _signal(activity.get(gpu.pk)),
                "power": gpu.node.get_power_state_display().lower()
                if state == POWERED_DOWN
                else "",
            }
        )
    return result


def _power(node) -> str:
    """The powered-down node's power state as the fleet page words it (off, resuming, ...)."""
    return node.get_power_state_display().lower()


def _signal(recent: dict | None) -> str:
    """What the GPU's busy/idle state is judged on (`window_signal`); empty without recent
    telemetry."""
    return "" if recent is None else window_signal(recent["gpm_minutes"])
