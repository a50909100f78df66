"""The what-if page's power-saving option: replay the proposal once more with idle nodes
powered down (``apps.fleet.power_rules``, the live rule; ``scheduler.replay_power``) and weigh
the money the energy saves against the job completion time it adds."""

from collections.abc import Callable
from datetime import datetime

from django.conf import settings

from apps.fleet.power_rules import PowerSaving, limits_from
from apps.jobs.scheduler.replay import ReplayResult, TraceJob, simulate
from apps.jobs.scheduler.replay_power import DEFAULT_IDLE_WATTS
from apps.jobs.scheduler.state import GpuInfo, TeamQuota
from portal import queries

# form field: (stored key, label in errors, default when empty, type)
FIELDS = {
    "power_save_after": ("idle_seconds", "Power down after", None, float),
    "resume_seconds": ("resume_seconds", "Resume time", 300.0, float),
    "warm_gpus": ("warm_gpus", "Warm GPUs", 0, int),
    "idle_watts": ("idle_watts", "Idle draw", DEFAULT_IDLE_WATTS, float),
}


def power_saving_from(data) -> tuple[dict | None, list[str]]:
    """The power-saving options of the form (None when "power down after" is empty: always
    on), and what was wrong with them."""
    if not str(data.get("power_save_after", "")).strip():
        return None, []
    options, errors = {}, []
    for field, (key, label, default, kind) in FIELDS.items():
        text = str(data.get(field, "")).strip()
        if not text:
            options[key] = default
            continue
        try:
            value = kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            errors.append(f"{label}: {text!r} is not {noun}.")
            continue
        if value < 0 or value != value or value in (float("inf"), float("-inf")):
            errors.append(f"{label} must be 0 or more.")
            continue
        options[key] = value
    return (None if errors else options), errors


def power_rules(options: dict) -> PowerSaving:
    """The stored options as the rule's settings, with the live anti-thrashing limits."""
    return PowerSaving(
        idle_seconds=options["idle_seconds"],
        resume_seconds=options["resume_seconds"],
        warm_gpus=options["warm_gpus"],
        **limits_from(settings),
    )


def power_comparison(
    *,
    history: list[TraceJob],
    gpus: list[GpuInfo],
    quotas: list[TeamQuota],
    policy: str,
    always_on: ReplayResult,
    options: dict,
    at: datetime,
    progress: Callable[[float], None],
) -> dict:
    """The proposal replayed with power saving against ``always_on`` (the same proposal, always
    on): node-hours off of the fully idle ones, energy and the money it saves at the rate cards'
    energy price (None without one), the average job completion time added, power cycles and
    bookings started late (none: the replay has no bookings). JSON-safe."""
    saved = simulate(
        history, gpus, quotas, policy, power_saving=power_rules(options),
        idle_watts=options["idle_watts"], progress=progress,
    )  # fmt: skip
    answers = [
        a
        for a in queries.ask("energy.price", kwh_by_model=saved.energy_saved_kwh_by_model, at=at)
        if a is not None
    ]
    added = saved.avg_jct - always_on.avg_jct
    return {
        "options": options,
        "idle_node_hours": always_on.idle_node_hours,
        "node_hours_off": saved.node_hours_off,
        "off_percent": (
            100 * saved.node_hours_off / always_on.idle_node_hours
            if always_on.idle_node_hours
            else 0.0
        ),
        "energy_saved_kwh": saved.energy_saved_kwh,
        "money_saved": str(answers[0]) if answers else None,
        "jct_added_h": added / 3600,
        "jct_added_percent": 100 * added / always_on.avg_jct if always_on.avg_jct else 0.0,
        "power_cycles": saved.power_cycles,
        "max_cycles_per_node_day": saved.max_cycles_per_node_day,
        "bookings_late": saved.bookings_late,
        "bookings_late_reason": saved.bookings_late_reason,
        "finished": saved.finished,
    }
