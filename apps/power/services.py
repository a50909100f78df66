"""The power policy: capacity follows demand without hurting users.

One cycle (`power_policy_cycle`, every minute from beat):
1. **Settle**: ask the driver of every node powering off or on what the hardware is; record
   `suspended` / `resumed`; a node not on within `POWER_RESUME_TIMEOUT_SECONDS` becomes
   `resume_failed` (its bookings move, its jobs go elsewhere, platform admins are mailed).
2. **Wake** powered-off nodes for bookings that start within the node's resume time plus
   margin (always, even with power saving off: a booking may have been placed on a powered-down
   node), for guarantee reclaims (at once) and for queued jobs that fit (after the minimum off
   time), through the shared rule `fleet.power_rules.nodes_to_wake`.
3. **Power down** (only with `POWER_SAVE_ENABLED`) each powered-on node the shared rule
   `fleet.power_rules.power_down_refusal` lets go: fully idle (no job, no booking, telemetry
   idle by the one activity rule, telemetry covering the window) for `POWER_SAVE_IDLE_MINUTES`,
   no booking within its resume time plus margin, no queued job that could start on it, on for
   `POWER_MIN_ON_MINUTES`, fewer than `POWER_MAX_CYCLES_PER_DAY` power-downs in 24 h, the warm
   reserve of its model (`POWER_SAVE_WARM_GPUS`) kept, and not opted out
   (`labels["power_save"] = "never"`).

Every state change goes through `fleet.services`; the drivers are asked after commit, by
`power_apply_request` (the `node.power_requested` event of fleet), so a slow BMC never holds a
database transaction.
"""

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.fleet import power_rules
from apps.fleet.choices import PowerState
from apps.fleet.models import Node
from apps.fleet.services import POLICY, node_power_observed, node_power_request
from apps.jobs.messaging import trigger_schedule
from apps.outbox.services import outbox_send_mail
from apps.power import selectors
from apps.power.drivers import driver_for
from apps.power.drivers.base import PowerDriverError
from apps.teams.selectors import platform_admins
from portal.exceptions import ApplicationError
from portal.formatting import format_when

logger = logging.getLogger(__name__)


def power_request_on_commit(*, node: Node, operation: str) -> None:
    """Subscriber of fleet's `node.power_requested`: ask the node's driver once the state
    change is committed (a Celery task, so the BMC's answer time is nobody's wait)."""
    from apps.power.tasks import apply_request  # noqa: PLC0415 - tasks import services

    node_id = node.pk
    transaction.on_commit(lambda: apply_request.delay(node_id, operation))


def power_apply_request(*, node_id: int, operation: str) -> str:
    """Ask the node's driver to power it off or on, as fleet recorded. A driver that cannot
    ask (unreachable BMC, failing script) leaves a node it was to power off on
    (`suspend_failed`) and one it was to power on `resume_failed`, with the driver's message.
    Safe to repeat: a node whose state has moved on is left alone."""
    node = Node.objects.get(pk=node_id)
    wanted = PowerState.SUSPENDING if operation == "power_off" else PowerState.RESUMING
    if node.power_state != wanted:
        return f"{node.hostname} is {node.power_state}; nothing to ask"
    try:
        driver = driver_for(node)
        if operation == "power_off":
            driver.power_off(node)
        else:
            driver.power_on(node)
    except PowerDriverError as error:
        logger.warning("power %s of %s failed: %s", operation, node.hostname, error)
        if operation == "power_off":
            node_power_observed(node=node, operation="suspend_failed", reason=str(error))
        else:
            _resume_failed(node, str(error))
        return f"{node.hostname}: {error}"
    return f"{node.hostname}: {operation} asked"


def _resume_failed(node: Node, reason: str) -> bool:
    """Record that the node did not power on, and tell the platform admins (once)."""
    if not node_power_observed(node=node, operation="resume_failed", reason=reason):
        return False
    outbox_send_mail(
        subject=f"[GPU portal] Node {node.hostname} did not power on",
        body=(
            f"Node {node.hostname} was asked to power on at "
            f"{format_when(node.power_state_since)} and is not on: {reason}\n\n"
            "Its bookings were moved to other GPUs where possible (their teams were told "
            "otherwise) and its jobs requeued. Look at the node's power controller; the node "
            "takes work again as soon as it reports on, or use Power on on the fleet page to "
            "try again."
        ),
        recipients=list(platform_admins().values_list("email", flat=True)),
    )
    return True


def power_settle(*, now: datetime | None = None) -> dict[str, list[str]]:
    """Read the driver of every node powering off or on (and of those that failed to power
    on, which may still come back) and record what the hardware did."""
    now = now or timezone.now()
    done: dict[str, list[str]] = {"suspended": [], "resumed": [], "resume_failed": []}
    timeout = timedelta(seconds=settings.POWER_RESUME_TIMEOUT_SECONDS)
    for node in selectors.nodes_in_transition():
        try:
            hardware = driver_for(node).read_state(node)
        except PowerDriverError as error:
            logger.warning("cannot read the power of %s: %s", node.hostname, error)
            hardware = "unknown"
        overdue = now - node.power_state_since >= timeout
        if node.power_state == PowerState.SUSPENDING:
            if hardware == "off":
                if node_power_observed(node=node, operation="suspended", reason="driver: off"):
                    done["suspended"].append(node.hostname)
            elif overdue:
                node_power_observed(
                    node=node,
                    operation="suspend_failed",
                    reason=f"still {hardware} {timeout.total_seconds():.0f} s after power off",
                )
        elif hardware == "on":
            if node_power_observed(node=node, operation="resumed", reason="driver: on"):
                done["resumed"].append(node.hostname)
                trigger_schedule()  # queued work may start there now
        elif node.power_state == PowerState.RESUMING and overdue:
            reason = (
                f"not on {timeout.total_seconds() / 60:.0f} min after power on "
                f"(the driver reads {hardware})"
            )
            if _resume_failed(node, reason):
                done["resume_failed"].append(node.hostname)
    return done


def _wake(node: Node, reason: str) -> bool:
    try:
        node_power_request(node=node, operation="power_on", actor=None, by=POLICY, reason=reason)
    except ApplicationError as error:  # its state moved meanwhile: the next cycle sees it
        logger.info("not waking %s: %s", node.hostname, error.message)
        return False
    return True


def power_wake(*, now: datetime | None = None, jobs: bool = True) -> list[str]:
    """Wake powered-off nodes for bookings that start within their lead time, for guarantee
    reclaims and (`jobs`) for queued jobs that fit. Returns the host names woken."""
    now = now or timezone.now()
    woken = []
    for node, reservation_id in selectors.bookings_needing_wake(now=now).items():
        if _wake(node, f"booking #{reservation_id} starts soon"):
            woken.append(node.hostname)
    if not jobs:
        return woken
    guarantee, other = selectors.job_demands(now=now)
    off = [(n, o) for n, o in selectors.off_nodes() if n.hostname not in woken]
    resuming = selectors.resuming_gpus_by_model()
    saving = selectors.saving_from_settings()
    by_name = {o.name: n for n, o in off}
    at = now.timestamp()
    # A guarantee is a promise: its capacity is woken whatever the minimum off time.
    for demands, rule_saving, why in (
        (guarantee, replace(saving, min_off_seconds=0), "a guarantee reclaim"),
        (other, saving, "queued jobs"),
    ):
        names = power_rules.nodes_to_wake(
            demands, [o for n, o in off if n.hostname in by_name], resuming, at, rule_saving
        )
        for name in names:
            node = by_name.pop(name)
            if _wake(node, f"woken for {why}"):
                woken.append(name)
                model = next(o for n, o in off if n.hostname == name)
                resuming[model.model] = resuming.get(model.model, 0) + model.gpus
    return woken


def power_down_idle(*, now: datetime | None = None) -> list[str]:
    """Power down each node the rule lets go (see the module's docstring), one at a time, the
    warm reserve recounted after each."""
    now = now or timezone.now()
    warm = selectors.warm_gpus_by_model()
    idle_on = selectors.idle_on_gpus_by_model(now=now)
    at = now.timestamp()
    powered_down = []
    for view in selectors.powered_on_nodes(now=now):
        power = view.power
        if not view.telemetry_covered and power.idle_since is not None:
            continue  # missing telemetry is never taken for idleness
        saving = replace(view.saving, warm_gpus=selectors.warm_gpus_for(power.model, warm))
        refusal = power_rules.power_down_refusal(power, at, saving, idle_on[power.model])
        if refusal is not None:
            logger.debug("power policy keeps %s on: %s", power.name, refusal)
            continue
        try:
            node_power_request(
                node=view.node,
                operation="power_off",
                actor=None,
                by=POLICY,
                reason=f"idle for {saving.idle_seconds / 60:.0f} min",
            )
        except ApplicationError as error:
            logger.info("not powering %s down: %s", power.name, error.message)
            continue
        idle_on[power.model] -= power.gpus
        powered_down.append(power.name)
    return powered_down


def power_policy_cycle(*, now: datetime | None = None) -> dict:
    """One pass of the policy: settle, wake, and (with power saving on) power idle nodes
    down. Bookings on powered-down nodes are served even with power saving off."""
    now = now or timezone.now()
    enabled = settings.POWER_SAVE_ENABLED
    return {
        "settled": power_settle(now=now),
        "woken": power_wake(now=now, jobs=enabled),
        "powered_down": power_down_idle(now=now) if enabled else [],
    }
