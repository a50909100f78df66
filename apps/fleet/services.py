"""Administrative state changes of nodes and GPUs. Every change is audited.

Platform admins decide drain (no new work), undrain and retire (permanently out of service);
telemetry observes reachability (`up`/`unreachable`) and GPU health (`lost`), and records them
through `node_set_reachable` and `gpu_set_health` below.
"""

from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.fleet.choices import GpuStatus, NodeStatus, PowerState
from apps.fleet.models import Gpu, GpuModel, MaintenanceWindow, Node, NodePowerEvent
from apps.fleet.transitions import (
    GPU_TRANSITIONS,
    NODE_STATES_GOVERNING_GPUS,
    NODE_TRANSITIONS,
    POWER_REQUESTS,
    POWER_TRANSITIONS,
    power_lead,
    undrained_status,
)
from portal import hooks, queries
from portal.exceptions import ConflictError, PolicyRefusal
from portal.roles import is_platform_admin


@dataclass
class StateChange:
    """The changed node or GPU, and what happened to bookings on GPUs that left service."""

    obj: Node | Gpu
    relocation: dict = field(default_factory=lambda: {"moved": [], "unresolved": []})


def _relocate_bookings(gpu_ids: list[int], actor, *, during=None) -> dict:
    """GPUs leave service: the answerers of `gpus.leaving_service` (reservations: move the
    bookings on them) report what they did; their reports are merged."""
    relocation: dict[str, list] = {"moved": [], "unresolved": []}
    for report in queries.ask("gpus.leaving_service", gpu_ids=gpu_ids, actor=actor, during=during):
        for key, items in report.items():
            relocation.setdefault(key, []).extend(items)
    return relocation


def _require_platform_admin(actor) -> None:
    if not is_platform_admin(actor):
        raise PolicyRefusal("Only platform admins may change node or GPU state.", code="not_admin")


def _transition(*, obj, transitions, operation: str, actor, reason: str) -> None:
    allowed_from, target = transitions[operation]
    if isinstance(obj, Node) and operation == "undrain":
        target = undrained_status(obj, timezone.now())
    if obj.status not in allowed_from:
        raise ConflictError(
            f"Cannot {operation} {obj}: it is {obj.status}.",
            code="invalid_state",
            detail={"status": obj.status, "operation": operation},
        )
    extra = {}
    if isinstance(obj, Gpu) and target == GpuStatus.RETIRED:
        extra["retired_at"] = timezone.now()  # metering charges its capacity up to here
    _change(
        obj,
        "status",
        target,
        action=f"{obj._meta.model_name}.{operation}",
        actor=actor,
        reason=reason,
        extra=extra,
    )


def _change(obj, field: str, value, *, action: str, actor, reason: str, extra=None) -> None:
    """Set one state field of a node or GPU (and any `extra` fields that go with it), save, and
    audit the change: every state change of the fleet goes through here."""
    before = {field: getattr(obj, field)}
    setattr(obj, field, value)
    for name, extra_value in (extra or {}).items():
        setattr(obj, name, extra_value)
    obj.save(update_fields=[field, *(extra or {})])
    audit_record(
        actor=actor, action=action, target=obj, before=before, after={field: value}, reason=reason
    )


@transaction.atomic
def node_change_state(*, node: Node, operation: str, actor, reason: str = "") -> StateChange:
    """Drain, undrain or retire a node. Retiring a node retires its GPUs too. Bookings on its
    GPUs move to other free GPUs of the same model where possible. Undraining restores the
    node's health: one whose agent is silent comes back unreachable (and lost), not up."""
    _require_platform_admin(actor)
    node = Node.objects.select_for_update().get(pk=node.pk)
    _transition(
        obj=node, transitions=NODE_TRANSITIONS, operation=operation, actor=actor, reason=reason
    )
    # Integrations that run work on the node (Slurm) follow; a refusal undoes the change.
    hooks.emit("node.state_changed", node=node, operation=operation, reason=reason, actor=actor)
    if operation == "retire":
        for gpu in node.gpus.select_for_update().exclude(status=GpuStatus.RETIRED):
            _transition(
                obj=gpu,
                transitions=GPU_TRANSITIONS,
                operation="retire",
                actor=actor,
                reason=f"node {node.hostname} retired. {reason}".strip(),
            )
    if operation == "undrain":
        _undrained_unreachable(node)
        return StateChange(node)
    gpu_ids = list(node.gpus.values_list("id", flat=True))
    return StateChange(node, _relocate_bookings(gpu_ids, actor))


def _undrained_unreachable(node: Node) -> None:
    """An undrained node that came back unreachable is a lost node (the health check only
    judges nodes that are up): higher layers requeue what still ran there."""
    if node.status == NodeStatus.UNREACHABLE:
        hooks.emit("node.lost", node=node, now=timezone.now())


@transaction.atomic
def gpu_change_state(*, gpu: Gpu, operation: str, actor, reason: str = "") -> StateChange:
    """Drain, undrain or retire one GPU (drained GPUs get no new bookings or jobs); its
    bookings move to another free GPU of the same model where possible."""
    _require_platform_admin(actor)
    gpu = Gpu.objects.select_for_update().select_related("node").get(pk=gpu.pk)
    if operation != "retire" and gpu.node.status in NODE_STATES_GOVERNING_GPUS:
        raise ConflictError(
            f"Cannot {operation} {gpu}: its node is {gpu.node.status}; change the node instead.",
            code="invalid_state",
            detail={"node_status": gpu.node.status, "operation": operation},
        )
    _transition(
        obj=gpu, transitions=GPU_TRANSITIONS, operation=operation, actor=actor, reason=reason
    )
    if operation == "undrain":
        return StateChange(gpu)
    return StateChange(gpu, _relocate_bookings([gpu.pk], actor))


@transaction.atomic
def maintenance_schedule(
    *, node: Node, start: datetime, end: datetime, reason: str, actor
) -> tuple[MaintenanceWindow, dict]:
    """Plan a maintenance window: the node's GPUs are not offered inside it, and bookings that
    overlap it move to other free GPUs of their model where possible (teams are told otherwise)."""
    _require_platform_admin(actor)
    errors = {}
    if end <= start:
        errors["end"] = "The end must be after the start."
    elif end <= timezone.now():
        errors["end"] = "The window is already over."
    if not reason.strip():
        errors["reason"] = "Say what the maintenance is for; teams see it."
    if errors:
        raise ValidationError(errors)
    node = Node.objects.select_for_update().get(pk=node.pk)
    window = MaintenanceWindow.objects.create(
        node=node, start=start, end=end, reason=reason, created_by=actor
    )
    audit_record(
        actor=actor,
        action="node.maintenance_schedule",
        target=node,
        after={"start": start.isoformat(), "end": end.isoformat(), "window": window.pk},
        reason=reason,
    )
    gpu_ids = list(node.gpus.values_list("id", flat=True))
    return window, _relocate_bookings(gpu_ids, actor, during=(start, end))


@transaction.atomic
def maintenance_cancel(*, window: MaintenanceWindow, actor) -> None:
    _require_platform_admin(actor)
    window = MaintenanceWindow.objects.select_for_update().select_related("node").get(pk=window.pk)
    audit_record(
        actor=actor,
        action="node.maintenance_cancel",
        target=window.node,
        before={
            "start": window.start.isoformat(),
            "end": window.end.isoformat(),
            "window": window.pk,
        },
        reason=window.reason,
    )
    window.delete()


# --- states observed by telemetry ------------------------------------------------------------
# Telemetry observes these (a node silent too long, an agent reporting again, NVML reporting a
# lost GPU) but the change and its audit belong here, like the admins' drain and retire.


def node_set_reachable(*, node: Node, reachable: bool, reason: str, now: datetime | None = None):
    """An `up` node that went silent becomes `unreachable` (its GPUs leave the pool, and the
    `node.lost` event lets higher layers react: jobs requeues what ran there); an unreachable
    node that reports again is `up` (`node.back`: jobs kills what it stopped there meanwhile).
    Drained and retired nodes keep their state. The caller holds the node's row lock. Returns
    True if the state changed."""
    before, after = (
        (NodeStatus.UNREACHABLE, NodeStatus.UP)
        if reachable
        else (NodeStatus.UP, NodeStatus.UNREACHABLE)
    )
    if node.status != before:
        return False
    action = "node.up" if reachable else "node.unreachable"
    _change(node, "status", after, action=action, actor=None, reason=reason)
    hooks.emit("node.back" if reachable else "node.lost", node=node, now=now or timezone.now())
    return True


def gpu_set_health(*, gpu: Gpu, health: str, reason: str) -> bool:
    """Record the health NVML reported for a GPU (a lost GPU leaves the pool), audited.
    The caller holds the GPU's row lock. Returns True if it changed."""
    if gpu.health == health:
        return False
    _change(gpu, "health", health, action=f"gpu.health_{health}", actor=None, reason=reason)
    return True


# --- power ----------------------------------------------------------------------------------
# The power policy (actor None) and platform admins ask for power off/on here; the node's
# driver is asked by the power app, which subscribes to `node.power_requested` and reports what
# the hardware did through `node_power_observed`.

POLICY = "power policy"


def _power_transition(node: Node, operation: str, *, actor, by: str, reason: str) -> None:
    allowed_from, target = POWER_TRANSITIONS[operation]
    if node.power_state not in allowed_from:
        raise ConflictError(
            f"Cannot {operation.replace('_', ' ')} {node}: its power is "
            f"{node.get_power_state_display().lower()}.",
            code="invalid_power_state",
            detail={"power_state": node.power_state, "operation": operation},
        )
    now = timezone.now()
    NodePowerEvent.objects.create(
        node=node, from_state=node.power_state, to_state=target, at=now, by=by, reason=reason
    )
    _change(
        node,
        "power_state",
        target,
        action=f"node.{operation}",
        actor=actor,
        reason=reason,
        extra={"power_state_since": now, "power_state_by": by},
    )


def _power_off_conflicts(node: Node, now: datetime) -> list[str]:
    """What powering the node off now would hurt: a booking on its GPUs before it could be
    back (resume time plus margin), or a running job."""
    until = now + power_lead(node)
    gpu_ids = list(node.gpus.values_list("id", flat=True))
    booked = {
        reservation
        for answer in queries.ask("gpus.bookings", start=now, end=until, gpu_ids=gpu_ids)
        for bookings in answer.values()
        for reservation in bookings
    }
    conflicts = [f"booking #{pk}" for pk in sorted(booked)]
    busy = [
        interval
        for answer in queries.ask(
            "gpus.busy_intervals", start=now, end=until, gpu_ids=gpu_ids, gpu_model=None, team=None
        )
        for interval in answer
    ]
    if busy:
        conflicts.append(f"{len({gpu for gpu, _, _ in busy})} GPU(s) running jobs")
    return conflicts


@transaction.atomic
def node_power_request(
    *, node: Node, operation: str, actor, reason: str = "", by: str = ""
) -> Node:
    """Ask for a node to power off or on. A platform admin (`actor`) may ask at any time the
    power state allows, but not to power off a node with running jobs or a booking before it
    could be back (drain it first); the power policy asks with `actor=None` and `by` naming
    itself, having checked its own stricter rules. The node enters `suspending`/`resuming`
    and the power app asks the node's driver (`node.power_requested`), after commit."""
    if operation not in POWER_REQUESTS:
        raise ValidationError({"operation": f"Unknown power operation {operation!r}."})
    if actor is not None:
        if not is_platform_admin(actor):
            raise PolicyRefusal("Only platform admins may power nodes off or on.", code="not_admin")
        by = actor.get_username()
    node = Node.objects.select_for_update().get(pk=node.pk)
    if node.status == NodeStatus.RETIRED:
        raise ConflictError(
            f"Cannot {operation.replace('_', ' ')} {node}: it is retired.",
            code="invalid_state",
            detail={"status": node.status, "operation": operation},
        )
    if operation == "power_off" and node.power_state == PowerState.ON:
        conflicts = _power_off_conflicts(node, timezone.now())
        if conflicts:
            raise ConflictError(
                f"Cannot power off {node}: {', '.join(conflicts)} would be hurt. Drain it first.",
                code="node_busy",
                detail={"conflicts": conflicts},
            )
    _power_transition(node, operation, actor=actor, by=by or POLICY, reason=reason)
    hooks.emit("node.power_requested", node=node, operation=operation)
    return node


@transaction.atomic
def node_power_observed(
    *, node: Node, operation: str, reason: str, by: str = "power driver"
) -> bool:
    """Record what the node's power driver reported (`suspended`, `suspend_failed`, `resumed`)
    or the policy concluded (`resume_failed`: not on within its resume timeout). A node that
    failed to resume loses its bookings to other GPUs (the relocation path of a drain) and its
    work goes elsewhere (`node.lost`, as for a node that stopped reporting). Returns False if
    the node's power state has moved on meanwhile (nothing to record)."""
    node = Node.objects.select_for_update().get(pk=node.pk)
    if operation in POWER_REQUESTS or node.power_state not in POWER_TRANSITIONS[operation][0]:
        return False
    _power_transition(node, operation, actor=None, by=by, reason=reason)
    if operation == "resume_failed":
        _relocate_bookings(list(node.gpus.values_list("id", flat=True)), None)
        hooks.emit("node.lost", node=node, now=timezone.now())
    return True


# --- states observed by an external scheduler -------------------------------------------------
# Where an integration runs the work (Slurm), the scheduler's operators may take a node out of
# service there; the portal follows through here so the change is audited like any other.


@transaction.atomic
def node_set_scheduler_drained(*, node: Node, drained: bool, scheduler: str, reason: str) -> bool:
    """Drain a node (`drained=True`) because the scheduler that runs its work took it out of
    service, or undrain it when the scheduler puts it back. Actor is the system; the audit names
    the scheduler and its reason. The scheduler is not told (it is the source): no
    `node.state_changed` event. Bookings on a drained node move like on an admin's drain.
    Whether an undrain is the scheduler's to make (it drained the node, not an admin) is the
    caller's record. Returns True if the state changed."""
    operation = "drain" if drained else "undrain"
    node = Node.objects.select_for_update().get(pk=node.pk)
    allowed_from, _ = NODE_TRANSITIONS[operation]
    if node.status not in allowed_from:
        return False
    _transition(
        obj=node,
        transitions=NODE_TRANSITIONS,
        operation=operation,
        actor=None,
        reason=f"{scheduler}: {reason}" if reason else scheduler,
    )
    if drained:
        _relocate_bookings(list(node.gpus.values_list("id", flat=True)), None)
    else:
        _undrained_unreachable(node)
    return True


# --- inventory: what the node agents report they have --------------------------------------


@transaction.atomic
def node_register(*, inventory: dict) -> Node:
    """Create or update a node and its GPUs (and MIG devices) from the agent's NVML inventory.

    Safe to repeat: an unchanged inventory changes nothing; a changed one is updated and the
    change audited. A retired node stays retired."""
    hostname = str(inventory["node"])
    node, created = Node.objects.select_for_update().get_or_create(
        hostname=hostname, defaults={"labels": inventory.get("labels") or {}}
    )
    now = timezone.now()
    if node.status == NodeStatus.UNREACHABLE:
        node_set_reachable(node=node, reachable=True, reason="the node's agent reported again")
    node.last_seen = now
    node.save(update_fields=["last_seen", "status"])
    changes = []
    for entry in inventory.get("gpus", []):
        model, _ = GpuModel.objects.get_or_create(
            name=entry["name"], defaults={"memory_mib": int(entry.get("memory_mib") or 0)}
        )
        domain = entry.get("nvlink_domain") or ""
        wanted = {
            "node": node,
            "index": int(entry["index"]),
            "model": model,
            "nvlink_domain": f"{hostname}/{domain}" if domain else "",
            "mig_parent": None,
            "mig_profile": "",
        }
        gpu = _upsert_gpu(entry["uuid"], wanted, changes)
        for mig in entry.get("mig_devices") or []:
            _upsert_gpu(
                mig["uuid"],
                {
                    "node": node,
                    "index": int(mig["index"]),
                    "model": model,
                    "nvlink_domain": wanted["nvlink_domain"],
                    "mig_parent": gpu,
                    "mig_profile": mig.get("profile") or "mig",
                },
                changes,
            )
    if created or changes:
        audit_record(
            actor=None,
            action="node.register",
            target=node,
            after={
                "gpus": len(inventory.get("gpus", [])),
                "changes": changes[:50],
                "backend": inventory.get("backend", ""),
            },
        )
    return node


def _upsert_gpu(uuid: str, wanted: dict, changes: list) -> Gpu:
    gpu = Gpu.objects.filter(uuid=uuid).first()
    if gpu is None:
        gpu = Gpu.objects.create(uuid=uuid, **wanted)
        changes.append(f"added {uuid}")
        return gpu
    differing = {k: v for k, v in wanted.items() if getattr(gpu, k) != v}
    if differing:
        for key, value in differing.items():
            setattr(gpu, key, value)
        gpu.save(update_fields=list(differing))
        changes.append(f"updated {uuid}: {', '.join(sorted(differing))}")
    return gpu
