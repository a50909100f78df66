"""Storing agent batches of GPU samples: validated, idempotent, never blocked by one bad batch.

Ingest is idempotent twice over: a batch's (node, seq) key is stored in the same transaction
as its rows, so a redelivered batch is skipped whole; and rows are unique on (gpu, ts), so a
sample that arrives again in another batch is dropped, not doubled.
"""

import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg
from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import Case, DateTimeField, F, Q, Value, When
from django.utils import timezone

from apps.fleet.choices import GpuHealth, NodeStatus
from apps.fleet.models import Gpu, Node
from apps.fleet.services import gpu_set_health
from apps.fleet.transitions import node_silence
from apps.telemetry.models import IngestBatch, TelemetryDeadLetter
from apps.telemetry.rollups import late_rollups_note
from apps.telemetry.services import counter_add, node_reported_again
from portal.bulk import insert_ignoring_duplicates
from portal.pg_text import storable
from workers.protocol import (
    INTEGER_FIELDS,
    MAX_HOSTNAME,
    MAX_SAMPLES_PER_BATCH,
    MAX_SEQ,
    SAMPLE_RANGES,
)

logger = logging.getLogger(__name__)

# A lost database connection: the batches stay queued for the next drain. Anything else a batch
# can cause (a value PostgreSQL refuses, a GPU deleted meanwhile) is that batch's problem only.
CONNECTION_ERRORS = (OperationalError, InterfaceError, psycopg.OperationalError)

SAMPLE_TABLE = "telemetry_gpusample"
SAMPLE_KEY = ("gpu_id", "ts")
# The table holds every measured field of the protocol, in its order.
SAMPLE_COLUMNS = ("gpu_id", "ts", *SAMPLE_RANGES)
# Every value of workers.protocol.HEALTH_VALUES (tests/workers/test_protocol.py).
HEALTH_FROM_AGENT = {
    "healthy": GpuHealth.HEALTHY,
    "degraded": GpuHealth.DEGRADED,
    "lost": GpuHealth.LOST,
}


@dataclass
class IngestResult:
    stored: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    duplicate_batch: bool = False

    def reject(self, reason: str, count: int = 1) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + count


# --- ingest ----------------------------------------------------------------------------------


_VALUE_CHECKS = tuple(
    (name, low, high, name in INTEGER_FIELDS) for name, (low, high) in SAMPLE_RANGES.items()
)
_NUMBER = (int, float)


def _clean_sample(
    sample, *, gpu_ids: dict, oldest: float, newest: float
) -> tuple[tuple | None, str]:
    """A sample as a row for GpuSample, or None and why it was rejected. (Runs for every
    sample of every node: kept to plain comparisons.) Every field is type-checked before it
    is used as a key or reaches the database, so no payload can raise here."""
    if type(sample) is not dict:
        return None, "malformed"
    uuid = sample.get("uuid")
    if type(uuid) is not str:
        return None, "malformed"
    gpu_id = gpu_ids.get(uuid)
    if gpu_id is None:
        return None, "unknown_gpu"
    health = sample.get("health")
    if health is not None and type(health) is not str:
        return None, "malformed"
    ts = sample.get("ts")
    if type(ts) not in _NUMBER or ts != ts or ts in (math.inf, -math.inf):
        return None, "bad_timestamp"
    if not oldest <= ts <= newest:
        return None, "timestamp_out_of_range"
    row = [gpu_id, datetime.fromtimestamp(ts, tz=UTC)]
    for name, low, high, integer in _VALUE_CHECKS:
        value = sample.get(name)
        if value is None:
            row.append(None)
            continue
        if type(value) not in _NUMBER or value != value or value in (math.inf, -math.inf):
            return None, "bad_value"  # bools, strings, NaN and infinities
        if not low <= value <= high:
            return None, "value_out_of_range"
        row.append(int(value) if integer else float(value))
    return tuple(row), ""


def _batch_problem(batch) -> str:
    """Why a message cannot be a batch at all (empty if it can): checked before anything of it
    touches the database, because one value PostgreSQL refuses would fail the whole drain."""
    if not isinstance(batch, dict) or not isinstance(batch.get("samples"), list):
        return "not a batch"
    hostname, seq = batch.get("node"), batch.get("seq")
    if type(hostname) is not str or not hostname:
        return "batch without a node name"
    # Not printable: control characters, NUL and lone surrogates ("\ud800"), so no name that
    # PostgreSQL or UTF-8 refuses gets further than this (portal.pg_text).
    if len(hostname) > MAX_HOSTNAME or not hostname.isprintable():
        return "node name too long or with control characters"
    if type(seq) is not int:
        return "batch without an integer sequence number"
    if not 0 <= seq <= MAX_SEQ:
        return "sequence number out of range"
    if len(batch["samples"]) > MAX_SAMPLES_PER_BATCH:
        return f"more than {MAX_SAMPLES_PER_BATCH} samples"
    return ""


def telemetry_ingest(*, batch, now: datetime | None = None) -> IngestResult:
    """Store one agent batch: good samples go in, bad ones are counted by reason and logged.

    Never raises on bad input: a telemetry worker must keep running whatever a node sends."""
    return telemetry_ingest_many(batches=[batch], now=now)[0]


def telemetry_ingest_many(*, batches: list, now: datetime | None = None) -> list[IngestResult]:
    """Store many agent batches in one transaction: one stamp for all their nodes, one
    multi-row insert of their batch keys, one COPY of their samples. The cost of a transaction
    is paid once per drain instead of once per node (see bench/telemetry.py).

    If the COPY meets a sample already stored (an agent re-sent it in a new batch), or anything
    else in the group fails to store, the whole transaction is rolled back and the batches go in
    one by one; a batch that still cannot be stored is parked as a dead letter (admin site) and
    counted, so it never blocks the others. Counters are written inside the same transactions,
    so a fallback never counts twice. Only a lost database connection raises: the caller then
    keeps the messages for the next drain."""
    now = now or timezone.now()
    try:
        return _ingest(batches, now, careful=len(batches) == 1)
    except CONNECTION_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - any payload must not stop ingestion
        if len(batches) == 1:
            return [_park(batches[0], now, exc)]
        if not isinstance(exc, psycopg.errors.UniqueViolation):
            logger.warning("telemetry group of %d failed (%r); one by one", len(batches), exc)
    results = []
    for batch in batches:
        try:
            results.append(_ingest([batch], now, careful=True)[0])
        except CONNECTION_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001
            results.append(_park(batch, now, exc))
    return results


def _park(batch, now: datetime, exc: BaseException) -> IngestResult:
    """Keep a batch that could not be stored as a dead letter, counted as malformed.

    Never raises for what the batch holds: if even the dead letter cannot be written, the
    batch is logged and dropped, so one message can never send a drain's messages back to the
    queue. Only a lost connection raises (the drain then keeps every message)."""
    _gpu_maps.clear()  # a GPU may have vanished under a cached map
    result = _malformed(batch)
    try:
        with transaction.atomic():
            reason = f"could not be stored: {type(exc).__name__}"
            if not _dead_letter(batch, reason=reason, error=str(exc)):
                return _redelivered()
            _count(result)
    except CONNECTION_ERRORS:
        raise
    except Exception:  # noqa: BLE001 - the last resort must not fail the drain
        logger.exception("telemetry batch could not be parked and is dropped (%r)", exc)
        return result
    logger.error("telemetry batch parked as a dead letter: %r", exc)
    return result


def _malformed(batch) -> IngestResult:
    """The result of a batch refused whole: all its samples (at least one) malformed."""
    samples = batch.get("samples") if isinstance(batch, dict) else None
    result = IngestResult()
    result.reject("malformed", max(1, len(samples) if isinstance(samples, list) else 0))
    return result


def _redelivered() -> IngestResult:
    """A message parked before and delivered again: counted as a duplicate, nothing else."""
    counter_add("batches_duplicate")
    return IngestResult(duplicate_batch=True)


def _dead_letter(batch, *, reason: str, error: str = "") -> bool:
    """Park a message; False if the very same message is parked already (a redelivery).
    Whatever text the message holds is stored escaped, so writing it cannot fail on content."""
    node = batch.get("node") if isinstance(batch, dict) else None
    text = _as_text(batch)
    fields = {
        "node": storable(node if isinstance(node, str) else repr(node), MAX_HOSTNAME),
        "reason": storable(reason, 200),
        "error": storable(error, 2000),
        "payload": storable(text, DEAD_LETTER_PAYLOAD_CHARS),
    }
    if batch is None:  # undecodable: no content to recognise it by
        TelemetryDeadLetter.objects.create(**fields)
        created = True
    else:
        digest = hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()
        _, created = TelemetryDeadLetter.objects.get_or_create(digest=digest, defaults=fields)
    if created:
        counter_add("dead_letters", reason.split(":")[0][:64])
    return created


DEAD_LETTER_PAYLOAD_CHARS = 65_536


def _as_text(payload) -> str:
    """The whole message as JSON (ASCII: lone surrogates come out as \\ud800 escapes)."""
    try:
        return json.dumps(payload, default=repr)
    except (TypeError, ValueError, RecursionError):
        try:
            return repr(payload)
        except RecursionError:
            return "<nested too deeply to show>"


def _count(result: IngestResult) -> None:
    for reason, count in result.rejected.items():
        counter_add("samples_rejected", reason, count)


def _ingest(batches: list, now: datetime, *, careful: bool) -> list[IngestResult]:
    results = [IngestResult() for _ in batches]
    with transaction.atomic():
        return _ingest_in_transaction(batches, results, now, careful=careful)


def _ingest_in_transaction(batches, results, now: datetime, *, careful: bool):
    valid = _well_formed(batches, results)
    if not valid:
        return results
    prepared = _prepare(valid, now)
    claimed = _claim_batches(
        [(h, seq, len(rows), sum(r.rejected.values())) for r, h, seq, _, rows, _ in prepared],
        now=now,
    )
    new_rows = []
    for result, hostname, seq, gpus, rows, health in prepared:
        if (hostname, seq) not in claimed:
            result.duplicate_batch = True
            result.rejected = {}
            counter_add("batches_duplicate")
            continue
        result.stored = len(rows)
        new_rows.extend(rows)
        if health:
            _apply_health(gpus, health)
        _count(result)
    _store(prepared, new_rows, careful=careful)
    late_rollups_note(rows=new_rows, now=now)
    for result, hostname, seq, *_ in prepared:
        if result.rejected:
            logger.warning("telemetry from %s seq %s: rejected %s", hostname, seq, result.rejected)
    return results


def _well_formed(batches, results) -> list[tuple]:
    """(result, node, seq, samples) of the batches that are batches; the others are parked."""
    valid = []
    for result, batch in zip(results, batches, strict=True):
        problem = _batch_problem(batch)
        if problem:
            if _dead_letter(batch, reason=problem):
                result.rejected = _malformed(batch).rejected
                _count(result)
                logger.warning("telemetry batch rejected: %s", problem)
            else:
                result.duplicate_batch = True
                counter_add("batches_duplicate")
            continue
        valid.append((result, batch["node"], batch["seq"], batch["samples"], _sent_at(batch)))
    return valid


def _sent_at(batch: dict) -> float | None:
    """When the agent sent the batch, by its own clock: its `sent_at`, or (agents that do not
    stamp batches) its newest sample's time; None if it holds neither."""
    stamp = batch.get("sent_at")
    if type(stamp) in _NUMBER and math.isfinite(stamp):
        return stamp
    times = [
        x["ts"]
        for x in batch["samples"]
        if type(x) is dict and type(x.get("ts")) in _NUMBER and math.isfinite(x["ts"])
    ]
    return max(times, default=None)


def _agent_stamps(valid: list[tuple], now: datetime) -> dict[str, datetime]:
    """The latest time each node's agent sent one of these batches, never past `now` (a clock
    ahead of the portal's must not keep a node alive)."""
    latest = now.timestamp()
    stamps: dict[str, float] = {}
    for _, hostname, _, _, sent in valid:
        sent = latest if sent is None else min(max(sent, 0.0), latest)
        stamps[hostname] = max(sent, stamps.get(hostname, sent))
    return {hostname: datetime.fromtimestamp(ts, tz=UTC) for hostname, ts in stamps.items()}


def _prepare(valid: list[tuple], now: datetime) -> list[tuple]:
    """(result, node, seq, gpus, rows, health) of the batches of known nodes."""
    node_ids = _nodes_seen(_agent_stamps(valid, now), now)
    now_mono = time.monotonic()
    stale = [n for n in node_ids.values() if _gpu_maps.get(n, (0,))[0] <= now_mono]
    if stale:
        _load_gpu_maps(stale)
    prepared = []
    for result, hostname, seq, samples, _ in valid:
        node_id = node_ids.get(hostname)
        if node_id is None:
            result.reject("unknown_node", max(1, len(samples)))
            _count(result)
            logger.warning("telemetry batch from unknown node %s rejected", hostname)
            continue
        gpus = _node_gpus(node_id)
        unknown = (x["uuid"] for x in samples if type(x) is dict and type(x.get("uuid")) is str)
        if any(uuid not in gpus for uuid in unknown):
            gpus = _node_gpus(node_id, refresh=True)  # the node may have re-registered
        rows, health = _clean_batch(samples, gpus, now, result)
        prepared.append((result, hostname, seq, gpus, rows, health))
    return prepared


def _store(prepared: list[tuple], new_rows: list[tuple], *, careful: bool) -> None:
    try:
        if careful:
            stored = store_samples(new_rows)
            for result, hostname, seq, *_ in prepared:
                if not result.duplicate_batch and result.stored != stored:
                    result.stored = stored
                    IngestBatch.objects.filter(node=hostname, seq=seq).update(stored=stored)
        else:
            _copy_samples(new_rows)
    except (IntegrityError, psycopg.errors.ForeignKeyViolation):
        _gpu_maps.clear()  # a GPU vanished under a cached map; the task retries afresh
        raise


def _clean_batch(samples: list, gpus: dict, now: datetime, result: IngestResult):
    """Rows to store, and health states that differ from what the portal knows."""
    gpu_ids = {uuid: pk for uuid, (pk, _) in gpus.items()}
    oldest = (now - timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS)).timestamp()
    newest = (now + timedelta(seconds=settings.TELEMETRY_MAX_CLOCK_SKEW_SECONDS)).timestamp()
    rows, health = [], {}
    for sample in samples:
        row, reason = _clean_sample(sample, gpu_ids=gpu_ids, oldest=oldest, newest=newest)
        if row is None:
            result.reject(reason)
            continue
        rows.append(row)
        state = HEALTH_FROM_AGENT.get(sample.get("health"))
        if state and state != gpus[sample["uuid"]][1]:
            health[sample["uuid"]] = state
    return rows, health


# Per-process map of each node's GPUs, so a batch of 8 samples does not cost a lookup. A GPU
# missing from the map triggers a refresh; health changes are re-checked under a row lock.
GPU_MAP_SECONDS = 30.0
_gpu_maps: dict[int, tuple[float, dict[str, tuple[int, str]]]] = {}


def _node_gpus(node_id: int, *, refresh: bool = False) -> dict[str, tuple[int, str]]:
    cached = _gpu_maps.get(node_id)
    if cached and not refresh and cached[0] > time.monotonic():
        return cached[1]
    return _load_gpu_maps([node_id])[node_id]


def _load_gpu_maps(node_ids) -> dict[int, dict[str, tuple[int, str]]]:
    """Fetch the GPU maps of several nodes in one query and cache them."""
    maps: dict[int, dict[str, tuple[int, str]]] = {node_id: {} for node_id in node_ids}
    rows = (
        Gpu.objects.filter(node_id__in=maps)
        .order_by()
        .values_list("node_id", "id", "uuid", "health")
    )
    for node_id, pk, uuid, health in rows:
        maps[node_id][uuid] = (pk, health)
    expires = time.monotonic() + GPU_MAP_SECONDS
    for node_id, gpus in maps.items():
        _gpu_maps[node_id] = (expires, gpus)
    return maps


def _claim_batches(keys: list[tuple[str, int, int, int]], *, now: datetime) -> set:
    """Record (node, seq, stored, rejected) batch keys in one statement; returns the (node, seq)
    that were new. The others were stored before: redeliveries. On PostgreSQL the keys travel
    as arrays: a VALUES list of a thousand batches cost more to send and parse than to store."""
    if not keys:
        return set()
    if connection.vendor == "postgresql":
        columns = [list(column) for column in zip(*keys, strict=True)]
        sql = (
            "INSERT INTO telemetry_ingestbatch (node, seq, received_at, stored, rejected) "
            "SELECT k.node, k.seq, %s, k.stored, k.rejected "
            "FROM unnest(%s::text[], %s::bigint[], %s::int[], %s::int[]) "
            "AS k(node, seq, stored, rejected) "
            "ON CONFLICT (node, seq) DO NOTHING RETURNING node, seq"
        )
        params = [now, *columns]
    else:
        values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(keys))
        params = [
            p for node, seq, stored, rejected in keys for p in (node, seq, now, stored, rejected)
        ]
        sql = (
            "INSERT INTO telemetry_ingestbatch (node, seq, received_at, stored, rejected) "  # noqa: S608
            f"VALUES {values} ON CONFLICT (node, seq) DO NOTHING RETURNING node, seq"
        )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {(node, seq) for node, seq in cursor.fetchall()}


def _copy_samples(rows: list[tuple]) -> None:
    """Plain COPY of new sample rows (PostgreSQL); raises UniqueViolation on a stored one.
    Elsewhere (SQLite) the careful insert, which is all there is."""
    insert_ignoring_duplicates(
        SAMPLE_TABLE, SAMPLE_COLUMNS, rows, conflict=SAMPLE_KEY, known_new=True
    )


def store_samples(rows: list[tuple]) -> int:
    """Insert sample rows, skipping any (gpu, ts) already stored. Returns rows inserted.

    PostgreSQL: a plain COPY (fastest); only if it meets a duplicate, COPY into a staging table
    and INSERT ... ON CONFLICT DO NOTHING. SQLite: INSERT ... ON CONFLICT DO NOTHING.

    Rows may stop before the GPM columns (readings of GPUs without GPM): those are null."""
    if not rows:
        return 0
    missing = len(SAMPLE_COLUMNS) - len(rows[0])
    if missing > 0:
        rows = [(*row, *(None,) * (len(SAMPLE_COLUMNS) - len(row))) for row in rows]
    if connection.vendor == "postgresql":
        try:
            return insert_ignoring_duplicates(
                SAMPLE_TABLE, SAMPLE_COLUMNS, rows, conflict=SAMPLE_KEY, known_new=True
            )
        except psycopg.errors.UniqueViolation:
            pass
    return insert_ignoring_duplicates(SAMPLE_TABLE, SAMPLE_COLUMNS, rows, conflict=SAMPLE_KEY)


def _nodes_seen(stamps: dict[str, datetime], now: datetime) -> dict[str, int]:
    """Record when each node's agent last sent (its own stamp; a late batch never moves it
    back) and bring back up any unreachable node whose agent sent within the silence window:
    a batch that waited in the queue since before the node was lost proves nothing about now.
    Returns the nodes' ids by hostname; unknown nodes are missing.

    One statement for the whole drain, whatever the number of nodes (PostgreSQL: an UPDATE
    joined to the stamps as arrays; a CASE of one WHEN per node cost seconds to build and run
    at a thousand nodes)."""
    if connection.vendor == "postgresql":
        found = _stamp_nodes_sql(stamps)
    else:
        found = _stamp_nodes_portable(stamps)
    fresh = now - node_silence()
    for node_id, _, status, last_seen in found:
        if status == NodeStatus.UNREACHABLE and last_seen >= fresh:
            node = Node.objects.select_for_update().get(pk=node_id)
            node_reported_again(node)
    return {hostname: node_id for node_id, hostname, _, _ in found}


# The CTE's UPDATE is not visible to the outer SELECT (same snapshot): the stamp written, if
# any, comes from its RETURNING.
STAMP_NODES_SQL = """
WITH sent AS (
    SELECT * FROM unnest(%s::text[], %s::timestamptz[]) AS s(hostname, sent_at)
), stamped AS (
    UPDATE fleet_node n SET last_seen = sent.sent_at
    FROM sent
    WHERE n.hostname = sent.hostname AND (n.last_seen IS NULL OR n.last_seen < sent.sent_at)
    RETURNING n.id, n.last_seen
)
SELECT n.id, n.hostname, n.status, coalesce(stamped.last_seen, n.last_seen)
FROM fleet_node n JOIN sent ON sent.hostname = n.hostname
LEFT JOIN stamped ON stamped.id = n.id
"""


def _stamp_nodes_sql(stamps: dict[str, datetime]) -> list[tuple]:
    """(id, hostname, status, last_seen) of the known nodes among `stamps`, stamped."""
    names = sorted(stamps)
    with connection.cursor() as cursor:
        cursor.execute(STAMP_NODES_SQL, [names, [stamps[name] for name in names]])
        return cursor.fetchall()


def _stamp_nodes_portable(stamps: dict[str, datetime]) -> list[tuple]:
    """As `_stamp_nodes_sql`, for databases without arrays (the SQLite demo)."""
    names = sorted(stamps)
    sent = Case(
        *(When(hostname=name, then=Value(stamps[name])) for name in names),
        output_field=DateTimeField(),
    )
    nodes = Node.objects.filter(hostname__in=names)
    nodes.update(
        last_seen=Case(
            When(Q(last_seen__isnull=True) | Q(last_seen__lt=sent), then=sent),
            default=F("last_seen"),
        )
    )
    return list(nodes.order_by().values_list("id", "hostname", "status", "last_seen"))


def _apply_health(gpus: dict, reported: dict) -> None:
    for uuid, state in reported.items():
        pk, _ = gpus[uuid]
        gpu = Gpu.objects.select_for_update().select_related("node").get(pk=pk)
        gpus[uuid] = (pk, state)
        gpu_set_health(gpu=gpu, health=state, reason="reported by NVML")
