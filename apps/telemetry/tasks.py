"""Thin Celery tasks of the telemetry pipeline; the work is in services, rollups and idle."""

from dataclasses import asdict

import psycopg
from celery import current_app, shared_task
from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from apps.fleet.choices import NodeStatus
from apps.fleet.models import Node
from apps.fleet.services import node_register
from apps.telemetry import drain as telemetry_queue
from apps.telemetry import idle, rollups, services
from apps.telemetry import ingest as ingest_batches
from workers.protocol import INGEST_TASK, POLL_TASK, REGISTER_NODE_TASK, node_queue


@shared_task(
    name=INGEST_TASK,
    autoretry_for=(IntegrityError, psycopg.errors.IntegrityError),
    max_retries=3,
    retry_backoff=True,
)
def ingest(batch) -> dict:
    """One batch from a node agent (acks late: a worker killed mid-batch gets it again, and
    the batch key makes the second delivery harmless). Retried if a GPU vanished mid-way."""
    return asdict(ingest_batches.telemetry_ingest(batch=batch))


@shared_task(name="telemetry.drain", time_limit=60, soft_time_limit=55)
def drain() -> dict:
    """Store the batches agents queued since the last drain, in one transaction."""
    return telemetry_queue.telemetry_drain()


@shared_task(name=REGISTER_NODE_TASK)
def register_node(inventory) -> str:
    return node_register(inventory=inventory).hostname


@shared_task(name="telemetry.poll_fleet")
def poll_fleet() -> int:
    """Ask every node's agent for a reading. The message expires with the poll interval, so a
    dead node's queue never piles up stale polls."""
    hostnames = Node.objects.exclude(status=NodeStatus.RETIRED).values_list("hostname", flat=True)
    for hostname in hostnames:
        current_app.send_task(
            POLL_TASK, queue=node_queue(hostname), expires=settings.TELEMETRY_POLL_SECONDS
        )
    return len(hostnames)


@shared_task(name="telemetry.minutely", time_limit=55, soft_time_limit=50)
def minutely() -> dict:
    """Every minute: roll up the last minutes, refresh node health, idle intervals and idle
    bookings (in that order: idle decisions read the rollups)."""
    now = timezone.now()
    return {
        "minutes": rollups.rollup_minutes(start=now - rollups.ROLLUP_WINDOW, end=now),
        "hours": rollups.rollup_hours(start=now - rollups.ROLLUP_WINDOW, end=now),
        "late": rollups.rollup_late(),
        "unreachable": services.nodes_mark_unreachable(now=now),
        "idle_intervals": idle.idle_intervals_update(now=now),
        "idle_bookings": idle.idle_bookings_check(now=now),
    }


@shared_task(name="telemetry.retention", time_limit=3000, soft_time_limit=2900)
def retention() -> dict:
    return services.telemetry_retention()
