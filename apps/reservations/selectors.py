"""Reads for reservations: what is free, what a team holds, what a user may see."""

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.fleet.models import Gpu, GpuModel
from apps.reservations import availability
from apps.reservations.availability import GpuInfo, Interval
from apps.reservations.choices import OPEN_STATUSES
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.policy import BookingPolicy
from apps.teams.models import Quota, Team


def reservation_list(*, user) -> QuerySet[Reservation]:
    """Reservations of the user's teams (all teams for finance and platform admins)."""
    return Reservation.objects.filter(team__in=Team.objects.for_user(user)).select_related(
        "team", "gpu_model", "created_by"
    )


def schedulable_gpus(*, gpu_model: GpuModel) -> list[GpuInfo]:
    rows = (
        Gpu.objects.schedulable()
        .filter(model=gpu_model, mig_parent__isnull=True)
        .values_list("id", "node__hostname", "index", "nvlink_domain")
    )
    return [
        GpuInfo(node=host, index=index, id=pk, nvlink_domain=domain or "")
        for pk, host, index, domain in rows
    ]


def busy_intervals(
    *, gpu_ids, start: datetime, end: datetime, exclude_reservation_id: int | None = None
) -> dict[int, list[Interval]]:
    """Active holdings of these GPUs that overlap [start, end), per GPU."""
    rows = ReservationGpu.objects.filter(
        active=True, gpu_id__in=gpu_ids, start__lt=end, end__gt=start
    )
    if exclude_reservation_id is not None:
        rows = rows.exclude(reservation_id=exclude_reservation_id)
    busy: dict[int, list[Interval]] = defaultdict(list)
    for gpu_id, s, e in rows.values_list("gpu_id", "start", "end"):
        busy[gpu_id].append((s, e))
    return busy


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
) -> list[availability.Slot]:
    gpus = schedulable_gpus(gpu_model=gpu_model)
    busy = busy_intervals(gpu_ids=[g.id for g in gpus], start=after, end=horizon + duration)
    return availability.find_slots(
        gpus,
        busy,
        count=count,
        duration=duration,
        after=after,
        horizon=horizon,
        slot=slot,
        same_node=same_node,
        limit=limit,
    )


def slots_from_now(
    *,
    gpu_model: GpuModel,
    count: int,
    duration: timedelta,
    after: datetime | None = None,
    same_node: bool = False,
    limit: int = 5,
) -> list[availability.Slot]:
    """Bookable slots under the booking policy: from now (or later) to the advance limit."""
    policy = BookingPolicy.from_settings()
    now = timezone.now()
    return availability_search(
        gpu_model=gpu_model,
        count=count,
        duration=duration,
        after=max(after or now, now),
        horizon=now + policy.max_advance,
        slot=policy.slot,
        same_node=same_node,
        limit=limit,
    )


def free_capacity(
    *, gpu_model: GpuModel, start: datetime, end: datetime, bucket: timedelta
) -> list[tuple[datetime, int]]:
    gpus = schedulable_gpus(gpu_model=gpu_model)
    busy = busy_intervals(gpu_ids=[g.id for g in gpus], start=start, end=end)
    return availability.free_capacity_timeline(gpus, busy, start=start, end=end, bucket=bucket)


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


def quota_usage_table(
    *, teams: QuerySet[Team] | None = None, now: datetime | None = None
) -> list[dict]:
    """Per quota row: guaranteed, limit, GPUs in use now, peak booked over the next 7 days."""
    now = now or timezone.now()
    week = now + timedelta(days=7)
    quotas = Quota.objects.select_related("team", "gpu_model")
    if teams is not None:
        quotas = quotas.filter(team__in=teams)
    rows = []
    for quota in quotas:
        model = quota.gpu_model
        in_use = len(
            team_booked_intervals(
                team=quota.team, start=now, end=now + timedelta(seconds=1), gpu_model=model
            )
        )
        booked = peak_concurrent(
            team_booked_intervals(team=quota.team, start=now, end=week, gpu_model=model)
        )
        rows.append(
            {
                "quota": quota,
                "team": quota.team,
                "gpu_model": model,
                "guaranteed": quota.guaranteed,
                "limit": quota.limit,
                "in_use": in_use,
                "booked_7d": booked,
                "left": max(quota.limit - booked, 0),
            }
        )
    return rows


def guarantee_pressure() -> list[dict]:
    """Per GPU model: sum of guarantees vs healthy capacity (a warning when over-committed)."""
    result = []
    for model in GpuModel.objects.order_by("name"):
        guaranteed = sum(Quota.objects.filter(gpu_model=model).values_list("guaranteed", flat=True))
        capacity = Gpu.objects.schedulable().filter(model=model, mig_parent__isnull=True).count()
        result.append(
            {
                "gpu_model": model,
                "guaranteed": guaranteed,
                "capacity": capacity,
                "overcommitted": guaranteed > capacity,
            }
        )
    return result


def open_reservations_on_gpus(*, gpu_ids, now: datetime) -> QuerySet[ReservationGpu]:
    return ReservationGpu.objects.filter(
        Q(gpu_id__in=gpu_ids),
        active=True,
        end__gt=now,
        reservation__status__in=OPEN_STATUSES,
    ).select_related("reservation", "reservation__team", "gpu")
