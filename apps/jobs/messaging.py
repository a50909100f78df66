"""What the jobs app sends once a transaction commits: tasks to node agents (through the
outbox, on each node's own queue) and the trigger of a scheduling cycle.

Every send of the jobs services and of the dispatcher goes through this module's functions,
called as `messaging.<name>`, so a test that cannot reach a node agent fakes `send_agent_task`
here, in one place, and every caller sees it.
"""

import logging

from celery import current_app
from django.db import transaction

from apps.jobs.models import Job
from apps.outbox.services import outbox_send_task
from workers.protocol import KILL_TASK, LAUNCH_TASK, node_queue

logger = logging.getLogger(__name__)


def send_agent_task(name: str, hostname: str, *args, key: str = "") -> None:
    """Send one task to a node agent's own queue (`node.<hostname>`) through the outbox: it is
    written in the caller's transaction and sent after the commit, or later by beat if the
    broker is down (a kill is delayed by an outage, never lost). A `key` lets a later change
    withdraw it while it is unsent."""
    outbox_send_task(name, queue=node_queue(hostname), args=args, key=key)


def launch_key(job: Job) -> str:
    """Outbox key of the launches of the job's current attempt (one per node)."""
    return f"{LAUNCH_TASK}:{job.pk}:{job.attempt}"


def trigger_schedule() -> None:
    """Ask for a scheduling cycle once the current transaction commits."""

    def _send() -> None:
        try:
            current_app.send_task("jobs.schedule", queue="portal", expires=5)
        except Exception:  # noqa: BLE001 - the beat cycle runs within seconds anyway
            logger.warning("could not trigger a scheduling cycle", exc_info=True)

    transaction.on_commit(_send)


def kill_on_commit(job: Job, hostnames: list[str], grace_seconds: int) -> None:
    """Kill the job's current attempt on each node (SIGTERM, then SIGKILL after the grace);
    sent after the commit, through the outbox."""
    for hostname in hostnames:
        send_agent_task(KILL_TASK, hostname, job.pk, job.attempt, grace_seconds)
