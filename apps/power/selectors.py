"""What the power policy reads: the nodes as the shared rule (`fleet.power_rules`) sees them,
and the demand for powered-down capacity (queued jobs, upcoming bookings, guarantee reclaims).
Demand comes from the apps below (jobs, reservations, telemetry); nothing here writes."""

from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Count, Max, Min, Q

from apps.fleet import power_rules
from apps.fleet.choices import NodeStatus, PowerState
from apps.fleet.models import Gpu, Node, NodePowerEvent
from apps.fleet.transitions import power_lead, resume_seconds
from apps.jobs.choices import WAITING_STATUSES
from apps.jobs.holdings import allocations_holding_at
from apps.jobs.models import Job, JobAllocation
from apps.jobs.scheduler.state import PendingReason
from apps.reservations.holdings import bookings_holding, bookings_holding_at
from apps.reservations.models import ReservationGpu
from apps.telemetry.activity import COVERAGE, busy_minute_q
from apps.telemetry.models import GpuMinuteRollup

# A waiting job with one of these reasons cannot start whatever the capacity: it neither keeps
# a node on nor wakes one.
NOT_CAPACITY_BOUND = {
    PendingReason.QUOTA_REACHED,
    PendingReason.BEYOND_QUOTA,
    PendingReason.RESERVATION_NOT_ACTIVE,
}
# A job within its team's guarantee: the promise is kept by waking capacity at once (no
# minimum off time) rather than by waiting.
GUARANTEE_REASONS = {PendingReason.RECLAIMING_GUARANTEE, PendingReason.WAITING_FOR_PREEMPTION}


def saving_from_settings() -> power_rules.PowerSaving:
    """The settings of power saving as the shared rule reads them."""
    return power_rules.PowerSaving(
        idle_seconds=settings.POWER_SAVE_IDLE_MINUTES * 60.0,
        resume_seconds=float(settings.POWER_RESUME_SECONDS),
        booking_margin_seconds=float(settings.POWER_BOOKING_MARGIN_SECONDS),
        **power_rules.limits_from(settings),
    )


def warm_gpus_by_model(value: str | int | None = None) -> dict[str, int]:
    """`POWER_SAVE_WARM_GPUS` read: "2" keeps 2 idle GPUs on per model; "H100=8,L40S=2,*=1"
    names models ("*": every model not named). Returns {model or "*": count}."""
    value = settings.POWER_SAVE_WARM_GPUS if value is None else value
    text = str(value).strip()
    if not text:
        return {"*": 0}
    parts = [text] if "=" not in text else text.split(",")
    warm = {"*": 0}
    for part in parts:
        model, _, count = part.rpartition("=") if "=" in part else ("*", "", part)
        try:
            number = int(count)
        except ValueError:
            number = -1
        if number < 0 or not model.strip():
            raise ImproperlyConfigured(
                f"POWER_SAVE_WARM_GPUS={value!r}: give a number of GPUs (e.g. 2) or "
                f"MODEL=N pairs separated by commas (e.g. H100-SXM-80GB=8,*=1); {part.strip()!r} "
                "is neither."
            )
        warm[model.strip()] = number
    return warm


def warm_gpus_for(model: str, warm: dict[str, int]) -> int:
    return warm.get(model, warm.get("*", 0))


@dataclass(frozen=True)
class NodeView:
    """A node as the policy sees it: the rule's view plus what the policy checks itself."""

    node: Node
    power: power_rules.NodePower
    saving: power_rules.PowerSaving  # with the node's own resume time
    telemetry_covered: bool  # telemetry covers enough of the idle window to call it idle


def _epoch(at: datetime | None) -> float | None:
    return at.timestamp() if at is not None else None


def _node_models(node_ids) -> dict[int, tuple[str, int]]:
    """Node id -> (its GPU model, how many in-service whole GPUs); the most common model of a
    node with several."""
    counts: dict[int, Counter] = {}
    for node_id, model in (
        Gpu.objects.in_service()
        .filter(node_id__in=node_ids, mig_parent__isnull=True)
        .values_list("node_id", "model__name")
    ):
        counts.setdefault(node_id, Counter())[model] += 1
    return {
        node_id: (counter.most_common(1)[0][0], sum(counter.values()))
        for node_id, counter in counts.items()
    }


def waiting_jobs() -> list[Job]:
    """Queued and requeued jobs, oldest first, with their model."""
    return list(
        Job.objects.filter(status__in=WAITING_STATUSES)
        .select_related("gpu_model")
        .order_by("submitted_at", "id")
    )


def powered_on_nodes(*, now: datetime) -> list[NodeView]:
    """Every up node that is powered on, as the rule reads it: when it last did anything (a
    job, a booking, busy telemetry), when it came on, its power-downs of the last 24 h, its
    next booking and whether a queued job could start on it now."""
    nodes = list(Node.objects.filter(status=NodeStatus.UP, power_state=PowerState.ON))
    ids = [node.pk for node in nodes]
    models = _node_models(ids)
    saving = saving_from_settings()
    window_start = now - timedelta(seconds=saving.idle_seconds)

    busy_now = set(
        allocations_holding_at(now)
        .filter(gpu__node_id__in=ids)
        .values_list("gpu__node_id", flat=True)
    ) | set(
        bookings_holding_at(now).filter(gpu__node_id__in=ids).values_list("gpu__node_id", flat=True)
    )
    last_job = dict(
        JobAllocation.objects.filter(gpu__node_id__in=ids, end__isnull=False)
        .values("gpu__node_id")
        .annotate(last=Max("end"))
        .values_list("gpu__node_id", "last")
    )
    last_booking = dict(
        ReservationGpu.objects.filter(gpu__node_id__in=ids, active=True, end__lte=now)
        .values("gpu__node_id")
        .annotate(last=Max("end"))
        .values_list("gpu__node_id", "last")
    )
    next_booking = dict(
        bookings_holding(now)
        .filter(gpu__node_id__in=ids, start__gt=now)
        .values("gpu__node_id")
        .annotate(first=Min("start"))
        .values_list("gpu__node_id", "first")
    )
    rollups = GpuMinuteRollup.objects.filter(
        gpu__node_id__in=ids, gpu__mig_parent__isnull=True, bucket__gte=window_start
    )
    last_busy_minute = dict(
        rollups.filter(busy_minute_q())
        .values("gpu__node_id")
        .annotate(last=Max("bucket"))
        .values_list("gpu__node_id", "last")
    )
    minutes_seen = dict(
        rollups.values("gpu__node_id").annotate(n=Count("id")).values_list("gpu__node_id", "n")
    )
    power_downs: dict[int, list[float]] = {}
    for node_id, at in NodePowerEvent.objects.filter(
        node_id__in=ids, to_state=PowerState.SUSPENDING, at__gt=now - timedelta(days=1)
    ).values_list("node_id", "at"):
        power_downs.setdefault(node_id, []).append(at.timestamp())
    waiting = [job for job in waiting_jobs() if job.pending_reason not in NOT_CAPACITY_BOUND]

    views = []
    for node in nodes:
        model, gpus = models.get(node.pk, ("", 0))
        if not gpus:
            continue
        ends = [last_job.get(node.pk), last_booking.get(node.pk)]
        if node.pk in last_busy_minute:
            ends.append(last_busy_minute[node.pk] + timedelta(minutes=1))
        ends = [end for end in ends if end is not None]
        idle_since = None if node.pk in busy_now else _epoch(max(ends, default=node.created_at))
        expected_minutes = gpus * saving.idle_seconds / 60.0
        node_saving = replace(saving, resume_seconds=float(resume_seconds(node)))
        views.append(
            NodeView(
                node=node,
                power=power_rules.NodePower(
                    name=node.hostname,
                    model=model,
                    gpus=gpus,
                    idle_since=idle_since,
                    on_since=node.power_state_since.timestamp(),
                    power_downs=tuple(power_downs.get(node.pk, ())),
                    opted_out=(node.labels or {}).get("power_save") == "never",
                    next_booking_start=_epoch(next_booking.get(node.pk)),
                    queued_job_fits=any(
                        (job.gpu_model is None or job.gpu_model.name == model)
                        and job.gpu_count <= gpus
                        for job in waiting
                    ),
                ),
                saving=node_saving,
                telemetry_covered=minutes_seen.get(node.pk, 0) >= COVERAGE * expected_minutes,
            )
        )
    return views


def idle_on_gpus_by_model(*, now: datetime) -> Counter:
    """Per model, the GPUs that are powered on, in service and free now (no job, no booking
    running): the warm reserve counts these."""
    held = set(allocations_holding_at(now).values_list("gpu_id", flat=True)) | set(
        bookings_holding_at(now).values_list("gpu_id", flat=True)
    )
    return Counter(
        Gpu.objects.schedulable()
        .filter(mig_parent__isnull=True)
        .exclude(pk__in=held)
        .values_list("model__name", flat=True)
    )


def bookings_needing_wake(*, now: datetime) -> dict[Node, int]:
    """Powered-off nodes with a booking that starts within the node's lead time (resume time
    plus margin), or already runs: node -> the first such booking's id."""
    wake: dict[Node, int] = {}
    nodes = {n.pk: n for n in Node.objects.filter(power_state=PowerState.OFF)}
    if not nodes:
        return wake
    holdings = bookings_holding(now).filter(gpu__node_id__in=nodes).order_by("start", "id")
    for node_id, start, reservation_id in holdings.values_list(
        "gpu__node_id", "start", "reservation_id"
    ):
        node = nodes[node_id]
        if node not in wake and start <= now + power_lead(node):
            wake[node] = reservation_id
    return wake


def job_demands(*, now: datetime) -> tuple[list[power_rules.Demand], list[power_rules.Demand]]:
    """The GPUs queued jobs wait for beyond the free powered-on ones, as the rule's demands:
    (guarantee reclaims, other queued work). A job that cannot start whatever the capacity
    (quota) asks for nothing."""
    free = idle_on_gpus_by_model(now=now)
    guarantee, other = [], []
    for job in waiting_jobs():
        if job.pending_reason in NOT_CAPACITY_BOUND:
            continue
        model = job.gpu_model.name if job.gpu_model else None
        models = [model] if model else sorted(free, key=lambda m: -free[m])
        taken = next((m for m in models if free[m] >= job.gpu_count), None)
        if taken is not None:
            free[taken] -= job.gpu_count
            continue
        # What the free GPUs of its model do not cover (a gang waits for them together).
        short = job.gpu_count - (free[model] if model else 0)
        if model:
            free[model] = 0
        demand = power_rules.Demand(gpus=short, model=model)
        (guarantee if job.pending_reason in GUARANTEE_REASONS else other).append(demand)
    return guarantee, other


def off_nodes() -> list[tuple[Node, power_rules.OffNode]]:
    """Powered-off up nodes that could be woken, not opted out of power saving."""
    nodes = list(Node.objects.filter(status=NodeStatus.UP, power_state=PowerState.OFF))
    models = _node_models([n.pk for n in nodes])
    return [
        (
            node,
            power_rules.OffNode(
                name=node.hostname,
                model=models[node.pk][0],
                gpus=models[node.pk][1],
                off_since=node.power_state_since.timestamp(),
            ),
        )
        for node in nodes
        if node.pk in models
    ]


def resuming_gpus_by_model() -> dict[str, int]:
    """GPUs on nodes powering on, per model: demand they will serve needs no further wake."""
    return dict(
        Gpu.objects.in_service()
        .filter(mig_parent__isnull=True, node__power_state=PowerState.RESUMING)
        .values("model__name")
        .annotate(n=Count("id"))
        .values_list("model__name", "n")
    )


def nodes_in_transition() -> list[Node]:
    """Nodes whose driver's answer is awaited (powering off or on), and those that failed to
    power on (they may still come back)."""
    return list(
        Node.objects.filter(
            Q(power_state=PowerState.SUSPENDING)
            | Q(power_state=PowerState.RESUMING)
            | Q(power_state=PowerState.RESUME_FAILED)
        ).exclude(status=NodeStatus.RETIRED)
    )
