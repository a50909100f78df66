"""The live scheduling cycle: database -> ClusterState -> schedule() -> database + agents.

One cycle runs at a time (a PostgreSQL advisory transaction lock; on SQLite the first write
takes the database's single write lock). A cycle is idempotent: it only places jobs that are
still waiting, and a GPU can hold one open allocation at most (a unique constraint).

A job the scheduler starts on the GPUs of this cycle's preemptions (``Decision.after_preemption``)
is not placed in the same cycle, unlike in the replayer: a victim keeps its GPUs (and their
memory) through the kill's grace period, and they return to the pool only when its node reports
the process gone (``JobAllocation.released_at``). Placing the job earlier would launch it next to
a process still holding the GPUs. The node's report asks for a cycle at once, and the waiting job,
within its guarantee, comes first in it; until then it is pending ``WAITING_FOR_PREEMPTION``.
"""

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from apps.fleet.models import Gpu
from apps.fleet.selectors import resuming_capacity
from apps.jobs import messaging, services
from apps.jobs.choices import ACTIVE_STATUSES, WAITING_STATUSES, JobStatus
from apps.jobs.holdings import allocations_holding
from apps.jobs.models import Job, JobAllocation
from apps.jobs.scheduler.state import (
    Booking,
    ClusterState,
    Decision,
    GpuInfo,
    PriorityClass,
    QueuedJob,
    ResumingNode,
    RunningJob,
    TeamQuota,
)
from apps.jobs.scheduler.usage import UserClock
from apps.jobs.transitions import job_transition
from apps.reservations.holdings import bookings_holding
from apps.teams.models import Quota, UnitQuota
from apps.teams.selectors import quota_org_tree, unit_quota_rows
from workers.protocol import LAUNCH_TASK

logger = logging.getLogger(__name__)

ADVISORY_LOCK_KEY = 0x6A6F6273  # "jobs"


@dataclass
class CycleResult:
    locked: bool = True
    placed: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    pending: int = 0


def _acquire_cycle_lock() -> bool:
    """Take the cycle lock for the current transaction; False if another cycle holds it."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEY])
            return bool(cursor.fetchone()[0])
        # SQLite: any write statement takes the single write lock until commit.
        cursor.execute("UPDATE jobs_job SET id = id WHERE 0")
        return True


def _lock_quotas() -> None:
    """Lock every quota row until the cycle commits: a booking locks its team's rows before it
    counts the team's running jobs, so a booking and a placement cannot both take a team's
    last GPU under its limit (they see each other's writes, one after the other). The units'
    rows likewise, after the teams' rows as a booking takes them."""
    list(Quota.objects.select_for_update().order_by("id").values_list("id", flat=True))
    list(UnitQuota.objects.select_for_update().order_by("id").values_list("id", flat=True))


def _ts(value: datetime) -> float:
    return value.timestamp()


def usage_by_team(*, now: datetime, half_life: float) -> dict[str, float]:
    """GPU-seconds each team used, each second weighted 0.5 ** (age / half_life)."""
    horizon = now - timedelta(seconds=half_life * 8)
    usage: dict[str, float] = {}
    rows = allocations_holding(horizon, now)
    for team, start, end in rows.values_list("job__team__slug", "start", "end"):
        start = max(start, horizon)
        end = min(end or now, now)
        if end <= start:
            continue
        # Integral of 0.5 ** ((now - t) / h) dt over [start, end).
        k = 0.6931471805599453 / half_life
        weight = (2 ** (-(now - end).total_seconds() / half_life)) - (
            2 ** (-(now - start).total_seconds() / half_life)
        )
        usage[team] = usage.get(team, 0.0) + weight / k
    return usage


def node_rack(node) -> str | None:
    """The rack a node's labels name (``{"rack": "r12"}``), None when unlabelled."""
    labels = node.labels if isinstance(node.labels, dict) else {}
    rack = labels.get("rack")
    return str(rack) if rack not in (None, "") else None


def gpu_info(gpu: Gpu) -> GpuInfo:
    """A schedulable GPU as the scheduler sees it (node, model, NVLink domain and rack)."""
    return GpuInfo(
        gpu_id=gpu.pk,
        node=gpu.node.hostname,
        model=gpu.model.name,
        nvlink_domain=gpu.nvlink_domain or None,
        rack=node_rack(gpu.node),
    )


def attained_gpu_seconds() -> dict[int, float]:
    """GPU-seconds each waiting job ran in its earlier attempts (requeued or preempted)."""
    attained: dict[int, float] = {}
    rows = JobAllocation.objects.filter(job__status__in=WAITING_STATUSES, end__isnull=False)
    for job_id, start, end in rows.values_list("job_id", "start", "end"):
        attained[job_id] = attained.get(job_id, 0.0) + max(0.0, (end - start).total_seconds())
    return attained


# How far back a user's jobs push the turns of their waiting ones: a backlog more than a day
# of the team's guaranteed GPUs deep is rare, and the query stays small.
TURN_LOOKBACK = timedelta(days=1)


def _turns(waiting: list[Job], guaranteed: dict[str, int]) -> dict[int, float]:
    """Each waiting job's turn in its team's queue (``UserClock``: per-user fair share inside
    a team), from its user's jobs in the team submitted since a day before the user's oldest
    waiting job, in submit order."""
    since: dict[tuple[int, int], datetime] = {}
    for job in waiting:
        if job.submitted_by_id is not None:
            key = (job.team_id, job.submitted_by_id)
            since[key] = min(since.get(key, job.submitted_at), job.submitted_at)
    if not since:
        return {}
    history = (
        Job.objects.filter(
            submitted_by_id__in={user for _, user in since},
            submitted_at__gte=min(since.values()) - TURN_LOOKBACK,
        )
        .order_by("submitted_at", "id")
        .values_list(
            "pk", "team_id", "team__slug", "submitted_by_id", "submitted_at", "gpu_count",
            "max_runtime_seconds",
        )
    )  # fmt: skip
    clock, turns = UserClock(), {}
    for pk, team_id, slug, user_id, submitted_at, gpus, runtime in history:
        first = since.get((team_id, user_id))
        if first is None or submitted_at < first - TURN_LOOKBACK:
            continue
        turns[pk] = clock.turn(
            slug, str(user_id), _ts(submitted_at), gpus * runtime, guaranteed.get(slug, 0)
        )
    return turns


def queued_jobs(waiting: list[Job], *, attained: dict[int, float] | None = None) -> list[QueuedJob]:
    """The waiting jobs (``team`` and ``gpu_model`` loaded) as the scheduler sees them, each
    with its turn in its team's queue."""
    guaranteed: dict[str, int] = {}
    for slug, count in Quota.objects.values_list("team__slug", "guaranteed"):
        guaranteed[slug] = guaranteed.get(slug, 0) + count
    turns = _turns(waiting, guaranteed)
    attained = attained or {}
    return [
        QueuedJob(
            job_id=job.pk,
            team=job.team.slug,
            gpu_model=job.gpu_model.name if job.gpu_model_id else None,
            gpu_count=job.gpu_count,
            max_runtime=float(job.max_runtime_seconds),
            submitted_at=_ts(job.submitted_at),
            priority_class=PriorityClass(job.priority_class),
            same_node=job.same_node,
            reservation_id=job.reservation_id,
            checkpointable=job.checkpointable,
            preemptions=job.preemption_count,
            attained=attained.get(job.pk, 0.0),
            turn=turns.get(job.pk),
            # as the last cycle that found it within its guarantee wrote it (None: not yet)
            reclaim_since=_ts(job.reclaim_since) if job.reclaim_since else None,
        )
        for job in waiting
    ]


def build_state(*, now: datetime) -> ClusterState:
    """What the scheduler sees now. Schedulable GPUs are active, healthy, on an up node (not
    drained, not in a maintenance window now), whole (MIG devices are not offered to jobs)."""
    # Stopped attempts whose node has not yet confirmed the process is gone: not free.
    awaiting_release = JobAllocation.objects.filter(
        end__isnull=False, released_at__isnull=True
    ).values("gpu_id")
    gpus = [
        gpu_info(g)
        for g in Gpu.objects.schedulable()
        .filter(mig_parent__isnull=True)
        .exclude(pk__in=awaiting_release)
        .exclude(node__maintenance_windows__start__lte=now, node__maintenance_windows__end__gt=now)
        .select_related("node", "model")
        .order_by("node__hostname", "index")
    ]
    bookings = [
        Booking(
            reservation_id=h.reservation_id,
            team=h.reservation.team.slug,
            gpu_id=h.gpu_id,
            start=_ts(h.start),
            end=_ts(h.end),
            model=h.gpu.model.name,
        )
        for h in bookings_holding(now).select_related("reservation__team", "gpu__model")
    ]
    open_allocs: dict[int, list[JobAllocation]] = {}
    for alloc in JobAllocation.objects.filter(end__isnull=True).select_related("gpu__model"):
        open_allocs.setdefault(alloc.job_id, []).append(alloc)
    running = []
    for job in Job.objects.filter(pk__in=open_allocs).select_related("team"):
        allocs = open_allocs[job.pk]
        started = job.started_at or job.dispatched_at or min(a.start for a in allocs)
        running.append(
            RunningJob(
                job_id=job.pk,
                team=job.team.slug,
                model=allocs[0].gpu.model.name,
                gpu_ids=tuple(sorted(a.gpu_id for a in allocs)),
                started_at=_ts(started),
                max_runtime=float(job.max_runtime_seconds),
                priority_class=PriorityClass(job.priority_class),
                over_quota=any(a.over_quota for a in allocs),
                reservation_id=job.reservation_id,
                checkpointable=job.checkpointable,
                preemptions=job.preemption_count,
            )
        )
    attained = attained_gpu_seconds()
    quota_rows = list(Quota.objects.select_related("team", "gpu_model"))
    waiting = list(
        Job.objects.filter(status__in=WAITING_STATUSES)
        .select_related("team", "gpu_model")
        .order_by("submitted_at", "id")
    )
    queued = queued_jobs(waiting, attained=attained)
    quotas = [
        TeamQuota(
            team=q.team.slug,
            model=q.gpu_model.name if q.gpu_model_id else None,
            guaranteed=q.guaranteed,
            limit=q.limit,
        )
        for q in quota_rows
    ]
    # The tree orders borrowing and reclaims even where no unit has a quota row.
    unit_quotas, tree = unit_quota_rows()
    return ClusterState(
        now=_ts(now),
        gpus=gpus,
        queued=queued,
        running=running,
        bookings=bookings,
        quotas=quotas,
        unit_quotas=unit_quotas,
        org_tree=tree or quota_org_tree(),
        usage=usage_by_team(now=now, half_life=settings.JOBS_USAGE_HALF_LIFE_SECONDS),
        resuming=[
            ResumingNode(node=host, model=model, gpus=count, ready_at=_ts(ready))
            for host, model, count, ready in resuming_capacity(now=now)
        ],
    )


def run_scheduler(state: ClusterState) -> Decision:
    from apps.jobs.scheduler import SchedulerConfig, schedule

    config = SchedulerConfig(
        usage_half_life_seconds=float(settings.JOBS_USAGE_HALF_LIFE_SECONDS),
        grace_seconds=float(settings.JOBS_KILL_GRACE_SECONDS),
        spare_order=settings.JOBS_SPARE_ORDER,
        **_preemption_settings(),
    )
    return schedule(state, settings.JOBS_SCHEDULER_POLICY, config)


def _preemption_settings() -> dict:
    return {
        "preempt_min_runtime_seconds": float(settings.JOBS_PREEMPT_MIN_RUNTIME_SECONDS),
        "max_preemptions_per_job": settings.JOBS_MAX_PREEMPTIONS_PER_JOB,
        "preempt_max_lost_ratio": settings.JOBS_PREEMPT_MAX_LOST_RATIO,
        "reclaim_patience_seconds": float(settings.JOBS_RECLAIM_PATIENCE_SECONDS),
        "gang_reclaim_patience_seconds": float(settings.JOBS_GANG_RECLAIM_PATIENCE_SECONDS),
        "reborrow_max_runtime_seconds": float(settings.JOBS_REBORROW_MAX_RUNTIME_SECONDS),
        "pack_borrowed": settings.JOBS_PACK_BORROWED,
    }


# Rendezvous port of a multi-node job on its rank-0 node (torchrun's default is 29500); spread
# by job id so two gangs led by one node do not collide.
MASTER_PORT_BASE = 29500
MASTER_PORT_SPREAD = 1000


def launch_spec(job: Job, gpus: list[Gpu], *, rank: int, ranks: int, master: str = "") -> dict:
    """The message `agent.launch` gets: everything the node needs, nothing from the DB.
    Each node of a gang gets its rank, the number of nodes (world size) and the rank-0 node's
    address and port, which the agent puts in PORTAL_JOB_RANK, WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT (with CUDA_VISIBLE_DEVICES = that node's GPUs) for torchrun / NCCL."""
    return {
        "master_addr": master or (gpus[0].node.hostname if gpus else ""),
        "master_port": MASTER_PORT_BASE + job.pk % MASTER_PORT_SPREAD,
        "world_size": ranks,
        "job_id": job.pk,
        "attempt": job.attempt,
        "name": job.name,
        "argv": list(job.argv),
        "workdir": job.workdir,
        "env": dict(job.env),
        "gpu_uuids": [g.uuid for g in gpus],
        "max_runtime_seconds": job.max_runtime_seconds,
        "grace_seconds": settings.JOBS_KILL_GRACE_SECONDS,
        "rank": rank,
        "ranks": ranks,
    }


def _apply(decision: Decision, *, now: datetime, result: CycleResult) -> None:
    waiting = {
        j.pk: j
        for j in Job.objects.select_for_update().filter(
            pk__in=[p.job_id for p in decision.placements] + [p.job_id for p in decision.pending],
            status__in=WAITING_STATUSES,
        )
    }
    busy = set(
        JobAllocation.objects.filter(released_at__isnull=True).values_list("gpu_id", flat=True)
    )
    gpus = Gpu.objects.select_related("node").in_bulk(
        [g for p in decision.placements for g in p.gpu_ids]
    )
    # A stop that committed after this cycle read its clock (a cancel, a finish report)
    # released its GPUs later than `now`: their next allocation starts at that release, so
    # the GPU's allocations never overlap.
    released = dict(
        JobAllocation.objects.filter(gpu_id__in=gpus, released_at__gt=now)
        .values("gpu_id")
        .annotate(last=Max("released_at"))
        .values_list("gpu_id", "last")
    )
    for placement in decision.placements:
        job = waiting.get(placement.job_id)
        chosen = [gpus[g] for g in placement.gpu_ids if g in gpus]
        if job is None or len(chosen) != len(placement.gpu_ids) or busy & set(placement.gpu_ids):
            logger.warning("skipped stale placement of job %s", placement.job_id)
            continue
        busy |= set(placement.gpu_ids)
        start = max([now, *(released[g] for g in placement.gpu_ids if g in released)])
        JobAllocation.objects.bulk_create(
            JobAllocation(
                job=job, gpu=gpu, attempt=job.attempt, start=start, over_quota=placement.over_quota
            )
            for gpu in chosen
        )
        by_node: dict[str, list[Gpu]] = {}
        for gpu in sorted(chosen, key=lambda g: (g.node.hostname, g.index)):
            by_node.setdefault(gpu.node.hostname, []).append(gpu)
        primary = max(by_node, key=lambda h: (len(by_node[h]), h == min(by_node)))
        hostnames = [primary] + sorted(h for h in by_node if h != primary)
        job_transition(job, JobStatus.DISPATCHED, at=start)
        job.node = by_node[primary][0].node
        job.save()
        for rank, hostname in enumerate(hostnames):
            spec = launch_spec(
                job, by_node[hostname], rank=rank, ranks=len(hostnames), master=primary
            )
            messaging.send_agent_task(LAUNCH_TASK, hostname, spec, key=messaging.launch_key(job))
        result.placed.append(job.pk)

    placed = set(result.placed)
    updates = []
    for pending in decision.pending:
        job = waiting.get(pending.job_id)
        if job is None or job.pk in placed:
            continue
        job.pending_reason = str(pending.reason)
        job.pending_message = pending.message[:500]
        job.estimated_start = (
            datetime.fromtimestamp(pending.estimated_start, tz=UTC)
            if pending.estimated_start is not None
            else None
        )
        updates.append(job)
    Job.objects.bulk_update(updates, ["pending_reason", "pending_message", "estimated_start"])
    result.pending = len(updates)
    _start_reclaim_clocks(decision, placed=placed)

    for preemption in decision.preemptions:
        job = Job.objects.filter(pk=preemption.job_id, status__in=ACTIVE_STATUSES).first()
        if job is None:
            continue
        services.job_preempt(job=job, for_job_id=preemption.for_job_id)
        result.preempted.append(job.pk)


def _start_reclaim_clocks(decision: Decision, *, placed: set[int]) -> None:
    """Keep the reclaim clocks this cycle started (``Decision.reclaim_clocks``) on the jobs
    still waiting, so the next cycle's fresh state counts each job's patience from the same
    time, as the replay does. A job keeps its first clock: a cycle never moves it."""
    by_time: dict[float, list[int]] = {}  # a cycle starts its clocks at its own time: one
    for job_id, since in decision.reclaim_clocks.items():
        if job_id not in placed:  # a started job's dispatch ended the wait the clock timed
            by_time.setdefault(since, []).append(job_id)
    for since, job_ids in by_time.items():
        Job.objects.filter(
            pk__in=job_ids, status__in=WAITING_STATUSES, reclaim_since__isnull=True
        ).update(reclaim_since=datetime.fromtimestamp(since, tz=UTC))


def schedule_cycle(*, now: datetime | None = None) -> CycleResult:
    """Run one scheduling cycle, or nothing if another is running (locked=False)."""
    now = now or timezone.now()
    result = CycleResult()
    if settings.JOB_BACKEND == "slurm":
        return result  # Slurm places the jobs; the integration follows their states.
    with transaction.atomic():
        if not _acquire_cycle_lock():
            return CycleResult(locked=False)
        services.jobs_expire_stale(now=now)
        _lock_quotas()
        state = build_state(now=now)
        if not state.queued:
            return result
        decision = run_scheduler(state)
        _apply(decision, now=now, result=result)
    if result.placed or result.preempted:
        logger.info("scheduled jobs %s, preempted %s", result.placed, result.preempted)
    return result
