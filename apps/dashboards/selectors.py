"""Reads behind the dashboards: filters, rollup series (downsampled), idle time, occupancy,
fleet health and quota pressure. Every function takes the teams the user may see; rows of
other teams never leave here.

Windows up to 24 hours read minute rollups, longer ones hour rollups. Rollups are summed over
GPUs in SQL (one row per bucket and team); buckets are then merged so that no trace has more
than `MAX_POINTS` points.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus
from apps.fleet.models import Gpu, GpuModel, Node
from apps.reservations.choices import OPEN_STATUSES, ReservationStatus
from apps.reservations.models import Reservation, ReservationGpu
from apps.teams.models import Quota, Team
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup, GpuSample, IdleInterval
from portal.exceptions import ApplicationError

MAX_POINTS = 500
MAX_SPAN = timedelta(days=400)
RANGES = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
UNALLOCATED = "unallocated"


class FilterError(ApplicationError):
    """A dashboard filter the user gave cannot be used (400); the message says why."""

    code = "bad_filter"


class TeamNotVisible(LookupError):
    """The team asked for does not exist for this user."""


@dataclass(frozen=True)
class Filters:
    start: datetime
    end: datetime
    range: str
    teams: tuple  # Team objects the user may see and asked for
    team_slug: str
    gpu_model: GpuModel | None
    sees_all: bool

    @property
    def team_ids(self) -> list[int]:
        return [t.pk for t in self.teams]

    @property
    def fine(self) -> bool:
        """True when the window is read from minute rollups."""
        return self.end - self.start <= timedelta(hours=24)

    def as_dict(self) -> dict:
        return {
            "range": self.range,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "team": self.team_slug or None,
            "gpu_model": self.gpu_model.name if self.gpu_model else None,
        }


def _aware(value: str, name: str) -> datetime:
    parsed = parse_datetime(value)
    if parsed is None:
        raise FilterError(f"{name} is not a date and time (use ISO 8601, e.g. 2026-01-31T09:00Z).")
    if timezone.is_naive(parsed):
        raise FilterError(f"{name} needs a time zone (e.g. 2026-01-31T09:00Z).")
    return parsed


def parse_filters(params, user, *, now: datetime | None = None) -> Filters:
    """Filters from query parameters: range (24h, 7d, 30d or custom with start and end), team
    (slug) and gpu_model (name). Raises FilterError (bad value) or TeamNotVisible."""
    now = now or timezone.now()
    range_ = params.get("range") or ("custom" if params.get("start") else "24h")
    if range_ in RANGES:
        end = now
        start = end - RANGES[range_]
    elif range_ == "custom":
        if not params.get("start"):
            raise FilterError("A custom range needs a start.")
        start = _aware(params["start"], "start")
        end = _aware(params["end"], "end") if params.get("end") else now
        if end <= start:
            raise FilterError("The end must be after the start.")
        if end - start > MAX_SPAN:
            raise FilterError("Ask for at most 400 days at once.")
    else:
        raise FilterError("range must be one of 24h, 7d, 30d or custom.")
    visible = Team.objects.for_user(user).order_by("slug")
    team_slug = params.get("team") or ""
    if team_slug:
        teams = tuple(visible.filter(slug=team_slug))
        if not teams:
            raise TeamNotVisible(team_slug)
    else:
        teams = tuple(visible)
    gpu_model = None
    if params.get("gpu_model"):
        gpu_model = GpuModel.objects.filter(name=params["gpu_model"]).first()
        if gpu_model is None:
            raise FilterError(f"There is no GPU model named {params['gpu_model']!r}.")
    return Filters(
        start=start,
        end=end,
        range=range_,
        teams=teams,
        team_slug=team_slug,
        gpu_model=gpu_model,
        sees_all=bool(user.sees_all_teams),
    )


def step_for(filters: Filters) -> timedelta:
    """Bucket size of the series: the rollup's own, or larger to keep to MAX_POINTS points."""
    base = timedelta(minutes=1) if filters.fine else timedelta(hours=1)
    span = filters.end - filters.start
    multiple = max(1, -(-int(span / base) // MAX_POINTS))
    return base * multiple


def _floor(ts: datetime, origin: datetime, step: timedelta) -> datetime:
    return origin + step * ((ts - origin) // step)


def _rollups(filters: Filters):
    model = GpuMinuteRollup if filters.fine else GpuHourRollup
    rows = model.objects.filter(bucket__gte=filters.start, bucket__lt=filters.end)
    if filters.gpu_model:
        rows = rows.filter(gpu__model=filters.gpu_model)
    return model, rows


def _uses(filters: Filters, *, all_teams: bool) -> list[tuple]:
    """What the chargeback charges as allocated, within the window, as
    (start, end, team_id, GPUs, of which in the fleet): active booking holdings, and job
    allocations outside bookings (a job inside a booking runs on GPUs the booking holds).
    Grouped in SQL by interval and team: the GPUs of one booking or job share them, so a month
    of a large fleet is a few hundred rows. Holdings never overlap on a GPU (a database
    constraint) and the scheduler places jobs outside bookings on GPUs no booking holds, so the
    counts add up."""
    in_fleet = Q(gpu__mig_parent__isnull=True) & ~Q(gpu__status=GpuStatus.RETIRED)
    holdings = ReservationGpu.objects.filter(
        active=True, start__lt=filters.end, end__gt=filters.start
    )
    if not all_teams:
        holdings = holdings.filter(reservation__team_id__in=filters.team_ids)
    if filters.gpu_model:
        holdings = holdings.filter(gpu__model=filters.gpu_model)
    rows = list(
        holdings.values_list("start", "end", "reservation__team_id")
        .annotate(n=Count("id"), fleet_n=Count("id", filter=in_fleet))
        .order_by()
    )
    try:
        from apps.jobs.models import JobAllocation
    except ImportError:  # pragma: no cover - the jobs app is optional for the dashboards
        JobAllocation = None
    if JobAllocation is not None:
        jobs = JobAllocation.objects.filter(
            Q(end__isnull=True) | Q(end__gt=filters.start),
            job__reservation__isnull=True,
            start__lt=filters.end,
        )
        if not all_teams:
            jobs = jobs.filter(job__team_id__in=filters.team_ids)
        if filters.gpu_model:
            jobs = jobs.filter(gpu__model=filters.gpu_model)
        for start, end, team_id, n, fleet_n in (
            jobs.values_list("start", "end", "job__team_id")
            .annotate(n=Count("id"), fleet_n=Count("id", filter=in_fleet))
            .order_by()
        ):
            rows.append((start, end or filters.end, team_id, n, fleet_n))
    clipped = []
    for start, end, team_id, n, fleet_n in rows:
        start, end = max(start, filters.start), min(end, filters.end)
        if end > start:
            clipped.append((start, end, team_id, n, fleet_n))
    return clipped


def _integrate(events: list[tuple[float, int]], edges: list[float]) -> list[float]:
    """GPU-seconds per step: `events` are (epoch, +n or -n) where n GPUs start or stop being
    counted, `edges` the step boundaries. One sweep over the sorted events."""
    events.sort()
    out = [0.0] * (len(edges) - 1)
    level, last, k = 0, edges[0], 0
    for moment, delta in events:
        while k < len(out) and edges[k + 1] <= moment:
            out[k] += level * (edges[k + 1] - last)
            last = edges[k + 1]
            k += 1
        if k < len(out):
            out[k] += level * (moment - last)
        last = moment
        level += delta
    while k < len(out):
        out[k] += level * (edges[k + 1] - last)
        last = edges[k + 1]
        k += 1
    return out


def allocated_series(filters: Filters, times: list[datetime], step: timedelta) -> dict:
    """Average GPUs allocated per team over each step, from bookings and jobs (not telemetry),
    so every range and bucket size gives the same answer for the same time: the value of an
    hour is the mean of its minutes. Those who see all teams also get `UNALLOCATED`: the rest
    of the fleet (GPUs neither retired nor MIG slices), as the chargeback counts it."""
    if not times:
        return {}
    with_pool = filters.sees_all and not filters.team_slug
    fleet = Gpu.objects.filter(mig_parent__isnull=True).exclude(status=GpuStatus.RETIRED)
    if filters.gpu_model:
        fleet = fleet.filter(model=filters.gpu_model)
    fleet_size = fleet.count()
    visible = set(filters.team_ids)
    events: dict[int | None, list] = defaultdict(list)  # team id, or None: the fleet's GPUs
    for start, end, team_id, n, fleet_n in _uses(filters, all_teams=with_pool):
        if team_id in visible:
            events[team_id] += ((start.timestamp(), n), (end.timestamp(), -n))
        if fleet_n:
            events[None] += ((start.timestamp(), fleet_n), (end.timestamp(), -fleet_n))
    edges = [t.timestamp() for t in times] + [(times[-1] + step).timestamp()]
    covered = [(min(t + step, filters.end) - max(t, filters.start)).total_seconds() for t in times]
    slugs = {t.pk: t.slug for t in filters.teams}
    result = {}
    for team_id, team_events in events.items():
        if team_id is None:
            continue
        seconds = _integrate(team_events, edges)
        result[slugs[team_id]] = {t: seconds[i] / covered[i] for i, t in enumerate(times)}
    if with_pool and fleet_size:
        held = _integrate(events.get(None, []), edges)
        result[UNALLOCATED] = {
            t: max(0.0, fleet_size - held[i] / covered[i]) for i, t in enumerate(times)
        }
    return result


def utilization_series(filters: Filters) -> dict:
    """Allocated and busy GPUs over time per team, and average utilization % per team and GPU
    model. Unallocated GPUs are shown only to those who see all teams, under `UNALLOCATED`.

    Allocated GPUs come from bookings and jobs (`allocated_series`), the same at every range.
    Busy GPUs come from the rollups (busy seconds / bucket seconds, i.e. GPU-equivalents busy):
    one scan, SQL sums per (bucket, team, model), Python merges buckets into steps. Returns
    {"step", "times", "allocated": {team: [...]}, "busy": {team: [...]},
    "by_team_model": [{"team_slug", "model_name", "util"}], "has_telemetry"}."""
    _, rows = _rollups(filters)
    scope = Q(team_id__in=filters.team_ids)
    if filters.sees_all and not filters.team_slug:
        scope |= Q(team__isnull=True)
    bucket_seconds = 60 if filters.fine else 3600
    grouped = (
        rows.filter(scope)
        .values_list("bucket", "team_id", "gpu__model_id")
        .annotate(
            busy=Sum("busy_seconds"),
            util_sum=Sum("util_avg"),
            util_n=Count("util_avg"),
        )
        .order_by()
    )
    slugs = {t.pk: t.slug for t in filters.teams}
    model_names = dict(GpuModel.objects.values_list("pk", "name"))
    step = step_for(filters)
    origin = _floor(filters.start, datetime(2000, 1, 1, tzinfo=filters.start.tzinfo), step)
    per_step = int(step.total_seconds() // bucket_seconds)
    busy: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    util: dict[tuple, list] = defaultdict(lambda: [0.0, 0])
    has_telemetry = False
    for bucket, team_id, model_id, busy_seconds, util_sum, util_n in grouped:
        has_telemetry = True
        key = _floor(bucket, origin, step)
        name = slugs.get(team_id, UNALLOCATED) if team_id is not None else UNALLOCATED
        # Average over the step: each bucket adds its share.
        busy[name][key] += (busy_seconds or 0) / bucket_seconds / per_step
        if team_id is not None and util_n:
            cell = util[(name, model_names[model_id])]
            cell[0] += util_sum
            cell[1] += util_n
    times = []
    t = _floor(filters.start, origin, step)
    while t < filters.end:
        times.append(t)
        t += step
    allocated = allocated_series(filters, times, step)
    names = sorted(set(allocated) | set(busy), key=lambda n: (n == UNALLOCATED, n))
    return {
        "step": step,
        "times": times,
        "allocated": {
            n: [round(allocated.get(n, {}).get(t, 0.0), 3) for t in times] for n in names
        },
        "busy": {n: [round(busy[n].get(t, 0.0), 3) for t in times] for n in names},
        "by_team_model": [
            {"team_slug": team, "model_name": model, "util": total / n}
            for (team, model), (total, n) in sorted(util.items())
        ],
        "has_telemetry": has_telemetry,
    }


def idle_hours(filters: Filters) -> dict:
    """Idle GPU-hours per day (per hour for windows up to a day), by kind and team. Unallocated
    idle time belongs to no team: only those who see all teams get it."""
    rows = IdleInterval.objects.filter(start__lt=filters.end, end__gt=filters.start)
    scope = Q(team_id__in=filters.team_ids)
    if filters.sees_all and not filters.team_slug:
        scope |= Q(team__isnull=True)
    rows = rows.filter(scope)
    if filters.gpu_model:
        rows = rows.filter(gpu__model=filters.gpu_model)
    step = timedelta(hours=1) if filters.fine else timedelta(days=1)
    if (filters.end - filters.start) / step > MAX_POINTS:
        step = (filters.end - filters.start) / MAX_POINTS
    origin = _floor(filters.start, datetime(2000, 1, 1, tzinfo=filters.start.tzinfo), step)
    series: dict[tuple, dict] = defaultdict(lambda: defaultdict(float))
    by_model: dict[tuple, float] = defaultdict(float)
    slugs = {t.pk: t.slug for t in filters.teams}
    model_of = dict(Gpu.objects.values_list("pk", "model__name"))
    for kind, team_id, gpu_id, start, end in rows.values_list(
        "kind", "team_id", "gpu_id", "start", "end"
    ):
        slug, model_name = slugs.get(team_id), model_of[gpu_id]
        start, end = max(start, filters.start), min(end, filters.end)
        by_model[(kind, model_name)] += (end - start).total_seconds() / 3600
        t = _floor(start, origin, step)
        while t < end:
            piece = (min(end, t + step) - max(start, t)).total_seconds() / 3600
            if piece > 0:
                series[(kind, slug or UNALLOCATED)][t] += piece
            t += step
    times = []
    t = _floor(filters.start, origin, step)
    while t < filters.end:
        times.append(t)
        t += step
    return {
        "step": step,
        "times": times,
        "series": {
            key: [round(values.get(t, 0.0), 3) for t in times]
            for key, values in sorted(series.items())
        },
        "by_model": [
            {"kind": kind, "model_name": name, "gpu_hours": round(hours, 3)}
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
    """Every GPU (no MIG devices) with its state now: unhealthy, busy, held_idle, unallocated.
    Held means an open booking of one of the user's visible teams holds it; GPUs held by teams
    the user cannot see show as `held_other`."""
    now = now or timezone.now()
    gpus = Gpu.objects.filter(mig_parent__isnull=True).select_related("node", "model")
    if filters.gpu_model:
        gpus = gpus.filter(model=filters.gpu_model)
    gpus = list(gpus.exclude(status=GpuStatus.RETIRED).exclude(node__status=NodeStatus.RETIRED))
    holders = dict(
        ReservationGpu.objects.filter(
            active=True, start__lte=now, end__gt=now, reservation__status__in=OPEN_STATUSES
        ).values_list("gpu_id", "reservation__team_id")
    )
    recent = now - timedelta(minutes=5)
    busy = set(
        GpuMinuteRollup.objects.filter(bucket__gte=recent, busy_seconds__gt=0).values_list(
            "gpu_id", flat=True
        )
    )
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
        elif team_id is not None and team_id not in visible:
            state = "held_other"
        elif gpu.pk in busy:
            state = "busy"
        elif team_id is not None:
            state = "held_idle"
        else:
            state = UNALLOCATED
        result.append(
            {
                "gpu": gpu,
                "node": gpu.node.hostname,
                "index": gpu.index,
                "model": gpu.model.name,
                "state": state,
                "team": slugs.get(team_id, ""),
            }
        )
    return result


def occupancy(filters: Filters) -> list[dict]:
    """Bookings and jobs on each GPU in the window, for the user's visible teams."""
    items = []
    holdings = ReservationGpu.objects.filter(
        active=True,
        start__lt=filters.end,
        end__gt=filters.start,
        reservation__team_id__in=filters.team_ids,
    ).exclude(reservation__status=ReservationStatus.CANCELLED)
    if filters.gpu_model:
        holdings = holdings.filter(gpu__model=filters.gpu_model)
    for h in holdings.select_related("gpu__node", "reservation__team")[:5000]:
        items.append(
            {
                "gpu": str(h.gpu),
                "kind": "booking",
                "team": h.reservation.team.slug,
                "label": f"booking #{h.reservation_id}",
                "start": max(h.start, filters.start),
                "end": min(h.end, filters.end),
            }
        )
    try:
        from apps.jobs.models import JobAllocation
    except ImportError:  # pragma: no cover - the jobs app is optional for the dashboards
        return items
    now = timezone.now()
    allocations = JobAllocation.objects.filter(
        Q(end__isnull=True) | Q(end__gt=filters.start),
        start__lt=filters.end,
        job__team_id__in=filters.team_ids,
    )
    if filters.gpu_model:
        allocations = allocations.filter(gpu__model=filters.gpu_model)
    for a in allocations.select_related("gpu__node", "job__team")[:5000]:
        items.append(
            {
                "gpu": str(a.gpu),
                "kind": "job",
                "team": a.job.team.slug,
                "label": f"job #{a.job_id} {a.job.name}",
                "start": max(a.start, filters.start),
                "end": min(a.end or now, filters.end),
            }
        )
    return items


def fleet_health(*, now: datetime | None = None) -> dict:
    """Nodes by status, GPUs by health, and each GPU's latest temperature and power."""
    now = now or timezone.now()
    nodes = dict(Node.objects.values_list("status").annotate(n=Count("id")).order_by())
    health = dict(
        Gpu.objects.filter(mig_parent__isnull=True)
        .exclude(status=GpuStatus.RETIRED)
        .values_list("health")
        .annotate(n=Count("id"))
        .order_by()
    )
    latest: dict[int, dict] = {}
    samples = (
        GpuSample.objects.filter(ts__gte=now - timedelta(minutes=10), ts__lte=now)
        .order_by("gpu_id", "-ts")
        .values("gpu_id", "temp_c", "power_w")
    )
    for row in samples.iterator(chunk_size=5000):
        latest.setdefault(row["gpu_id"], row)
    labels = {g.pk: str(g) for g in Gpu.objects.filter(pk__in=latest).select_related("node")}
    readings = [
        {"gpu": labels[gpu_id], "temp_c": row["temp_c"], "power_w": row["power_w"]}
        for gpu_id, row in latest.items()
        if gpu_id in labels
    ]
    readings.sort(key=lambda r: r["gpu"])
    unreported = list(
        Node.objects.exclude(status=NodeStatus.RETIRED)
        .exclude(gpus__in=list(latest))
        .values_list("hostname", flat=True)
        .distinct()
    )
    return {
        "nodes": {s.value: nodes.get(s.value, 0) for s in NodeStatus},
        "health": {h.value: health.get(h.value, 0) for h in GpuHealth},
        "readings": readings,
        "unreported": unreported,
    }


def quota_pressure(filters: Filters, *, now: datetime | None = None) -> list[dict]:
    """Per team and quota: GPUs held now, GPUs asked for by queued jobs, guaranteed and limit."""
    now = now or timezone.now()
    quotas = Quota.objects.filter(team_id__in=filters.team_ids).select_related("team", "gpu_model")
    if filters.gpu_model:
        quotas = quotas.filter(Q(gpu_model=filters.gpu_model) | Q(gpu_model__isnull=True))
    held = defaultdict(int)
    for team_id, model_id in ReservationGpu.objects.filter(
        active=True,
        start__lte=now,
        end__gt=now,
        reservation__status__in=OPEN_STATUSES,
        reservation__team_id__in=filters.team_ids,
    ).values_list("reservation__team_id", "gpu__model_id"):
        held[(team_id, model_id)] += 1
        held[(team_id, None)] += 1
    waiting = defaultdict(int)
    try:
        from apps.jobs.choices import JobStatus
        from apps.jobs.models import Job
    except ImportError:  # pragma: no cover
        Job = None
    if Job is not None:
        for team_id, model_id, count in Job.objects.filter(
            team_id__in=filters.team_ids, status__in=[JobStatus.QUEUED, JobStatus.REQUEUED]
        ).values_list("team_id", "gpu_model_id", "gpu_count"):
            waiting[(team_id, model_id)] += count
            if model_id is not None:
                waiting[(team_id, None)] += count
    rows = []
    for q in quotas:
        key = (q.team_id, q.gpu_model_id)
        rows.append(
            {
                "team": q.team.slug,
                "gpu_model": q.gpu_model.name if q.gpu_model else "any model",
                "guaranteed": q.guaranteed,
                "limit": q.limit,
                "held": held.get(key, 0),
                "waiting": waiting.get(key, 0),
            }
        )
    return rows


def busy_threshold() -> int:
    return settings.TELEMETRY_BUSY_UTIL_PERCENT


def home_summary(user, *, now: datetime | None = None) -> dict:
    """What the home page shows: per team of the user, quota, open bookings, jobs and spend this
    month; for platform admins, GPU states now and quota pressure of every team."""
    now = now or timezone.now()
    own = list(Team.objects.filter(memberships__user=user).distinct().order_by("slug"))
    bookings = defaultdict(list)
    for r in (
        Reservation.objects.filter(team__in=own, status__in=OPEN_STATUSES, end__gt=now)
        .select_related("gpu_model")
        .order_by("start")
    ):
        bookings[r.team_id].append(r)
    jobs = defaultdict(lambda: defaultdict(int))
    try:
        from apps.jobs.models import Job

        for team_id, status, n in (
            Job.objects.filter(team__in=own, status__in=["queued", "requeued", "running"])
            .values_list("team_id", "status")
            .annotate(n=Count("id"))
            .order_by()
        ):
            jobs[team_id]["queued" if status == "requeued" else status] += n
    except ImportError:  # pragma: no cover
        pass
    spend = {}
    try:
        from apps.billing import selectors as billing
        from apps.billing.periods import month_start

        period = billing.period_for_month(month_start(now))
        spend = {t.pk: billing.team_spend(team=t, period=period) for t in own}
    except ImportError:  # pragma: no cover
        pass
    quotas = defaultdict(list)
    for q in Quota.objects.filter(team__in=own).select_related("gpu_model"):
        quotas[q.team_id].append(q)
    teams = [
        {
            "team": t,
            "quotas": quotas[t.pk],
            "bookings": bookings[t.pk][:5],
            "booking_count": len(bookings[t.pk]),
            "jobs_queued": jobs[t.pk]["queued"],
            "jobs_running": jobs[t.pk]["running"],
            "spend": spend.get(t.pk),
        }
        for t in own
    ]
    summary = {"teams": teams}
    if user.is_platform_admin:
        filters = parse_filters({}, user, now=now)
        states = gpu_states_now(filters, now=now)
        summary["gpu_states"] = {
            s: sum(1 for g in states if g["state"] == s)
            for s in ("busy", "held_idle", UNALLOCATED, "unhealthy")
        }
        summary["quota_pressure"] = [
            row for row in quota_pressure(filters, now=now) if row["waiting"] or row["held"]
        ]
    return summary
