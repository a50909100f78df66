"""Telemetry from the node agents: counters, node health, retention (the inventory agents report
is registered by `apps.fleet.services.node_register`).

Storing samples is `apps.telemetry.ingest`, taking them off the broker `apps.telemetry.drain`,
rollups `apps.telemetry.rollups`, idle GPUs `apps.telemetry.idle`.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Sum, Value, When
from django.db.models.functions import Greatest
from django.utils import timezone

from apps.fleet.choices import NodeStatus, PowerState
from apps.fleet.models import Node
from apps.fleet.services import node_set_reachable
from apps.fleet.transitions import node_silence
from apps.telemetry import partitions
from apps.telemetry.models import (
    DrainHeartbeat,
    GpuSample,
    IngestBatch,
    TelemetryCounter,
    TelemetryDeadLetter,
)
from portal.formatting import format_when

logger = logging.getLogger(__name__)


def counter_add(name: str, reason: str = "", amount: int = 1) -> None:
    if amount <= 0:
        return
    updated = TelemetryCounter.objects.filter(name=name, reason=reason).update(
        value=F("value") + amount
    )
    if not updated:
        TelemetryCounter.objects.bulk_create(
            [TelemetryCounter(name=name, reason=reason, value=0)], ignore_conflicts=True
        )
        TelemetryCounter.objects.filter(name=name, reason=reason).update(value=F("value") + amount)


def node_reported_again(node: Node) -> None:
    node_set_reachable(node=node, reachable=True, reason="the node's agent reported again")


# --- node health -----------------------------------------------------------------------------
# A node is judged by when its agent sent (the agent's own stamp, `Node.last_seen`), and only
# while the portal has been able to hear it: batches wait in the broker's queue until a drain
# stores them, so silence during a broker pause, a drain outage or a backlog is the portal's.

HEARTBEAT = 1  # the one DrainHeartbeat row


def drain_heartbeat_record(*, started: datetime, finished: datetime, backlog: bool) -> None:
    """A drain ran from `started` to `finished`; `backlog`: it left batches queued or in
    flight. A drain after a gap longer than TELEMETRY_DRAIN_STALE_SECONDS starts a new
    unbroken run: the portal was deaf during the gap."""
    gap = started - timedelta(seconds=settings.TELEMETRY_DRAIN_STALE_SECONDS)
    updated = DrainHeartbeat.objects.filter(pk=HEARTBEAT).update(
        listening_since=Case(
            When(last_run_at__lt=gap, then=Value(started)), default=F("listening_since")
        ),
        last_run_at=Greatest(F("last_run_at"), Value(finished)),
        backlog=backlog,
    )
    if not updated:
        DrainHeartbeat.objects.bulk_create(
            [
                DrainHeartbeat(
                    pk=HEARTBEAT, listening_since=started, last_run_at=finished, backlog=backlog
                )
            ],
            ignore_conflicts=True,
        )


def node_health_withheld(now: datetime) -> str:
    """Why node health may not be judged now (empty if it may): the drain has not run lately,
    batches are still queued, or it has not run unbroken for a whole silence window."""
    heartbeat = DrainHeartbeat.objects.filter(pk=HEARTBEAT).first()
    if heartbeat is None:
        return "the telemetry drain has not run yet"
    if heartbeat.last_run_at < now - timedelta(seconds=settings.TELEMETRY_DRAIN_STALE_SECONDS):
        return f"the telemetry drain has not run since {format_when(heartbeat.last_run_at)}"
    if heartbeat.backlog:
        return "agents' batches are still queued"
    if heartbeat.listening_since > now - node_silence():
        return f"the telemetry drain runs again only since {format_when(heartbeat.listening_since)}"
    return ""


def nodes_mark_unreachable(*, now: datetime | None = None) -> list[str]:
    """Nodes whose agent sent nothing for TELEMETRY_MISSED_POLLS_UNREACHABLE polls become
    unreachable: their GPUs leave the schedulable pool until the agent reports again. No
    verdict while their batches may still wait in the queue (`node_health_withheld`)."""
    now = now or timezone.now()
    withheld = node_health_withheld(now)
    if withheld:
        logger.info("node health not judged: %s", withheld)
        return []
    marked = []
    with transaction.atomic():
        # A powered-down node is silent by design; one just powered on gets a silence window
        # of its own to start its agent.
        cutoff = now - node_silence()
        stale = (
            Node.objects.select_for_update(skip_locked=True)
            .filter(status=NodeStatus.UP, power_state=PowerState.ON, last_seen__lt=cutoff)
            .exclude(power_events__to_state=PowerState.ON, power_events__at__gte=cutoff)
        )
        for node in stale:
            reason = f"no telemetry sent since {format_when(node.last_seen)}"
            if node_set_reachable(node=node, reachable=False, reason=reason, now=now):
                marked.append(node.hostname)
    return marked


# --- retention -------------------------------------------------------------------------------

RETENTION_BATCH = 10_000


def _delete_in_batches(queryset) -> int:
    """Delete by primary-key batches: each statement is short, so ingest never waits long."""
    deleted = 0
    while True:
        ids = list(queryset.values_list("pk", flat=True)[:RETENTION_BATCH])
        if not ids:
            return deleted
        deleted += queryset.model.objects.filter(pk__in=ids).delete()[0]


def _expire(queryset, table: str, cutoff: datetime) -> int:
    """Remove a time-partitioned table's rows before `cutoff`: whole days dropped where
    PostgreSQL partitions the table, batched deletes elsewhere (SQLite)."""
    if partitions.partitioning_available() and partitions.is_partitioned(table):
        return partitions.drop_days_before(table, cutoff, batch=RETENTION_BATCH)
    return _delete_in_batches(queryset)


def telemetry_retention(*, now: datetime | None = None) -> dict[str, int]:
    """Drop raw samples, batch keys and dead letters past TELEMETRY_RAW_RETENTION_DAYS and
    minute rollups past TELEMETRY_MINUTE_RETENTION_DAYS (on PostgreSQL by whole days, see
    `apps.telemetry.partitions`). Hour rollups are kept. Creates the coming days' partitions
    first."""
    from apps.telemetry.models import GpuMinuteRollup

    now = now or timezone.now()
    created = partitions.ensure_partitions(now=now)
    raw_cutoff = now - timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS)
    minute_cutoff = now - timedelta(days=settings.TELEMETRY_MINUTE_RETENTION_DAYS)
    old_batches = IngestBatch.objects.filter(received_at__lt=raw_cutoff)
    # Stored-sample totals live on the batch keys; keep them when the keys go.
    counter_add("samples_stored_archived", amount=old_batches.aggregate(n=Sum("stored"))["n"] or 0)
    return {
        "partitions_created": len(created),
        "samples": _expire(
            GpuSample.objects.filter(ts__lt=raw_cutoff), "telemetry_gpusample", raw_cutoff
        ),
        "batches": _delete_in_batches(old_batches),
        "minute_rollups": _expire(
            GpuMinuteRollup.objects.filter(bucket__lt=minute_cutoff),
            "telemetry_gpuminuterollup",
            minute_cutoff,
        ),
        "dead_letters": _delete_in_batches(
            TelemetryDeadLetter.objects.filter(received_at__lt=raw_cutoff)
        ),
    }
