"""When an idle GPU node may power down and which powered-off nodes to wake: the one rule, as
pure functions over plain data (no Django, no database), so that the live power policy and the
trace replayer (``replay_trace``, the what-if page) decide alike.

* ``power_down_refusal(node, now, saving, idle_on_gpus)``: why the node must stay on, or None
  when it may power down. A node powers down only when it has been fully idle (no job, no
  booking) and on for ``idle_seconds``, has been on for ``min_on_seconds``, was powered down fewer
  than ``max_cycles_per_day`` times in the last 24 h, no booking on it starts within its resume
  time plus ``booking_margin_seconds``, no queued job could start on it now, it has not opted
  out, and the idle powered-on GPUs of its model left after it goes stay at ``warm_gpus`` or
  more (the warm reserve).
* ``next_power_down_check(node, saving)``: the earliest time the time-bound refusals (idle
  time, minimum on time, the cycles of the last 24 h) may lift, for callers that keep timers.
* ``nodes_to_wake(demands, off_nodes, resuming_gpus, now, saving)``: the powered-off nodes to
  wake so that queued work finds room once they have resumed; a node stays off for at least
  ``min_off_seconds``.

It lives in fleet, the app that owns a node's power state, so that every app above it (jobs'
replayer, the power policy) can call it without importing upward.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DAY_SECONDS = 86400.0
DEFAULT_MAX_CYCLES_PER_DAY = 4
DEFAULT_MIN_ON_SECONDS = 600.0
DEFAULT_MIN_OFF_SECONDS = 300.0
DEFAULT_BOOKING_MARGIN_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class PowerSaving:
    """The power-saving settings one decision reads; ``ValueError`` for impossible ones."""

    idle_seconds: float  # fully idle this long before it may power down
    resume_seconds: float  # from the wake request until the node takes work again
    warm_gpus: int = 0  # idle powered-on GPUs of each model that stay on
    max_cycles_per_day: int = DEFAULT_MAX_CYCLES_PER_DAY  # power-downs per node in any 24 h
    min_on_seconds: float = DEFAULT_MIN_ON_SECONDS  # on at least this long before powering down
    min_off_seconds: float = DEFAULT_MIN_OFF_SECONDS  # off at least this long before waking
    booking_margin_seconds: float = DEFAULT_BOOKING_MARGIN_SECONDS

    def __post_init__(self) -> None:
        for name in (
            "idle_seconds", "resume_seconds", "warm_gpus", "max_cycles_per_day",
            "min_on_seconds", "min_off_seconds", "booking_margin_seconds",
        ):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"Power saving: {name.replace('_', ' ')} must not be negative.")


@dataclass(frozen=True, slots=True)
class NodePower:
    """A powered-on node as the rule reads it (times in epoch seconds)."""

    name: str
    model: str
    gpus: int
    idle_since: float | None  # since when nothing runs or is booked on it; None: busy now
    on_since: float  # when it last came on (or was first seen)
    power_downs: tuple[float, ...] = ()  # when it powered down; the last 24 h suffice
    opted_out: bool = False  # ``labels["power_save"] == "never"``
    next_booking_start: float | None = None  # the next booking on any of its GPUs
    queued_job_fits: bool = False  # a queued job could start on it now


@dataclass(frozen=True, slots=True)
class OffNode:
    """A powered-off node that could be woken."""

    name: str
    model: str
    gpus: int
    off_since: float


@dataclass(frozen=True, slots=True)
class Demand:
    """Queued work waiting for room: ``gpus`` more GPUs of ``model`` (None: any model)."""

    gpus: int
    model: str | None = None


def limits_from(settings) -> dict:
    """The anti-thrashing limits the live policy reads from settings
    (``POWER_MAX_CYCLES_PER_DAY``, ``POWER_MIN_ON_MINUTES``, ``POWER_MIN_OFF_MINUTES``; this
    module's defaults where a deployment sets none), as ``PowerSaving`` keyword arguments."""
    minutes = {
        name: getattr(settings, f"POWER_{name.upper()}_MINUTES", None)
        for name in ("min_on", "min_off")
    }
    return {
        "max_cycles_per_day": getattr(
            settings, "POWER_MAX_CYCLES_PER_DAY", DEFAULT_MAX_CYCLES_PER_DAY
        ),
        "min_on_seconds": DEFAULT_MIN_ON_SECONDS
        if minutes["min_on"] is None
        else minutes["min_on"] * 60.0,
        "min_off_seconds": DEFAULT_MIN_OFF_SECONDS
        if minutes["min_off"] is None
        else minutes["min_off"] * 60.0,
    }


def cycles_in_last_day(power_downs: Iterable[float], now: float) -> int:
    """Power-downs in the 24 h before ``now``."""
    return sum(1 for at in power_downs if now - DAY_SECONDS < at <= now)


def power_down_refusal(
    node: NodePower, now: float, saving: PowerSaving, idle_on_gpus: int
) -> str | None:
    """Why ``node`` must stay on now, as one sentence, or None when it may power down.
    ``idle_on_gpus``: the idle GPUs of its model on powered-on nodes, its own included."""
    if node.opted_out:
        return f"{node.name} is excluded from power saving."
    if node.idle_since is None:
        return f"{node.name} is in use."
    idle = now - max(node.idle_since, node.on_since)  # idle while on
    if idle < saving.idle_seconds:
        return (
            f"{node.name} has been idle for {idle / 60:.0f} of "
            f"{saving.idle_seconds / 60:.0f} minutes."
        )
    if now - node.on_since < saving.min_on_seconds:
        return f"{node.name} came on less than {saving.min_on_seconds / 60:.0f} minutes ago."
    if node.queued_job_fits:
        return f"A queued job could start on {node.name} now."
    if node.next_booking_start is not None:
        lead = saving.resume_seconds + saving.booking_margin_seconds
        if node.next_booking_start - now < lead:
            return f"A booking on {node.name} starts within its resume time."
    cycles = cycles_in_last_day(node.power_downs, now)
    if cycles >= saving.max_cycles_per_day:
        return (
            f"{node.name} powered down {cycles} times in the last 24 h "
            f"(at most {saving.max_cycles_per_day})."
        )
    left = idle_on_gpus - node.gpus
    if left < saving.warm_gpus:
        return (
            f"Powering {node.name} down would leave {max(left, 0)} idle {node.model} GPUs on; "
            f"the warm reserve is {saving.warm_gpus}."
        )
    return None


def next_power_down_check(node: NodePower, saving: PowerSaving) -> float | None:
    """The earliest time at which the time-bound refusals of ``power_down_refusal`` may all
    have lifted (idle long enough, on long enough, a power-down of the last 24 h aged out);
    None for a busy or excluded node, which only a change (a job ending) makes a candidate."""
    if node.opted_out or node.idle_since is None or saving.max_cycles_per_day == 0:
        return None
    idle_from = max(node.idle_since, node.on_since)
    at = max(idle_from + saving.idle_seconds, node.on_since + saving.min_on_seconds)
    recent = sorted(node.power_downs)[-saving.max_cycles_per_day :]
    if len(recent) >= saving.max_cycles_per_day:
        at = max(at, recent[0] + DAY_SECONDS)  # when the oldest of them leaves the window
    return at


def nodes_to_wake(
    demands: Sequence[Demand],
    off_nodes: Sequence[OffNode],
    resuming_gpus: dict[str, int],
    now: float,
    saving: PowerSaving,
) -> list[str]:
    """The powered-off nodes to wake for ``demands`` (in the order they are served), beyond
    the GPUs already resuming per model (``resuming_gpus``). A demand already covered by
    resuming GPUs of a model it accepts takes them; otherwise nodes of the model with the most
    GPUs to wake are woken until it is covered (ones that cover it alone first, then the
    longest off). Nodes off for less than ``min_off_seconds`` stay off; a demand nothing can
    cover wakes what there is."""
    spare = dict(resuming_gpus)
    wakeable: dict[str, list[OffNode]] = {}
    for node in off_nodes:
        if now - node.off_since >= saving.min_off_seconds:
            wakeable.setdefault(node.model, []).append(node)
    woken: list[str] = []
    for demand in demands:
        if demand.gpus <= 0:
            continue
        models = [demand.model] if demand.model is not None else sorted(set(spare) | set(wakeable))
        covered = [m for m in models if spare.get(m, 0) >= demand.gpus]
        if covered:
            spare[covered[0]] -= demand.gpus
            continue
        choices = [m for m in models if wakeable.get(m)]
        if not choices:
            continue
        model = max(choices, key=lambda m: (sum(n.gpus for n in wakeable[m]), m))
        nodes = wakeable[model]
        while nodes and spare.get(model, 0) < demand.gpus:
            need = demand.gpus - spare.get(model, 0)
            node = min(nodes, key=lambda n: (n.gpus < need, n.off_since, n.name))
            nodes.remove(node)
            woken.append(node.name)
            spare[model] = spare.get(model, 0) + node.gpus
        spare[model] = max(0, spare.get(model, 0) - demand.gpus)
        if not any(wakeable.values()):
            break
    return woken
