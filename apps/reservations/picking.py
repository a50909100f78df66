"""Reads that choose a new booking's GPUs: which free GPUs `availability.pick_gpus` picks from.

A booking must not load every free GPU of the fleet to book one: with a thousand GPUs that
is a thousand rows built and sorted while the model's picking lock is held. When one node
has room for the whole booking, `pick_gpus` takes the node with the fewest free GPUs that
still fits (best fit, then by hostname), so the database names that node and returns only its
free GPUs, in one query; `pick_gpus` over them gives the same choice as over them all. Only
when no node fits (a booking spread over nodes, or none possible) are all free GPUs loaded.

The query is SQL written out around the fleet's own `Gpu.objects.schedulable` (compiled by the
ORM): the overlap tests built through the ORM cost more time in Python than the rest of the
booking. It runs on both databases. Its meaning is `selectors.schedulable_gpus` with
`free_from`/`free_until` (schedulable by the start, no active holding overlapping, no
maintenance window of the node, not held by a running job); a test holds the two to the same
answer.
"""

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from apps.fleet.models import Gpu, GpuModel
from apps.reservations.availability import GpuInfo
from apps.reservations.holdings import GPU_BOOKED_SQL

# The nodes in maintenance over the window are read once (a window's node is never NULL), not
# looked up for each GPU: PostgreSQL ran that lookup a thousand times on a 1,000-GPU fleet.
_FREE_GPUS = """
    SELECT g.id, n.hostname, g."index", g.nvlink_domain, g.uuid, g.node_id
    FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id
    WHERE g.id IN ({schedulable})
      AND NOT {booked}
      AND g.node_id NOT IN (
          SELECT w.node_id FROM fleet_maintenancewindow w
          WHERE w.start < %s AND w."end" > %s)
      {held_elsewhere}
"""

_BEST_FITTING_NODE = """
    WITH free AS ({free})
    SELECT id, hostname, "index", nvlink_domain, uuid, node_id FROM free
    WHERE node_id = (
        SELECT node_id FROM free GROUP BY node_id, hostname HAVING COUNT(*) >= %s
        ORDER BY COUNT(*), hostname LIMIT 1)
"""


# On PostgreSQL the usual booking (one node takes it) picks and holds its GPUs in the statement
# that reads them, right after the model's picking lock: the lock is then held over that one
# round trip and the commit, not over the pick's rows travelling to Python, the pick there and
# the holdings' INSERT. The pick is `pick_gpus` on one node written out: the smallest NVLink
# domain of the node that holds `count` (then by name, as Python orders strings), else the
# node; the GPUs by index. The GPUs past the first `keep` are above the guarantee.
_PICK_AND_HOLD = """
    WITH free AS ({free}),
    cand AS (
        SELECT * FROM free WHERE node_id = (
            SELECT node_id FROM free GROUP BY node_id, hostname HAVING COUNT(*) >= %s
            ORDER BY COUNT(*), hostname LIMIT 1)),
    domain AS (
        SELECT nvlink_domain FROM cand WHERE COALESCE(nvlink_domain, '') <> ''
        GROUP BY nvlink_domain HAVING COUNT(*) >= %s
        ORDER BY COUNT(*), nvlink_domain COLLATE "C" LIMIT 1),
    picked AS (
        SELECT cand.*, ROW_NUMBER() OVER (ORDER BY "index", id) AS place FROM cand
        WHERE NOT EXISTS (SELECT 1 FROM domain)
           OR nvlink_domain = (SELECT nvlink_domain FROM domain)
        ORDER BY "index", id LIMIT %s),
    held AS (
        INSERT INTO reservations_reservationgpu
            (reservation_id, gpu_id, start, "end", active, stranded, change_reason, over_quota)
        SELECT %s, id, %s, %s, TRUE, FALSE, '', place > %s FROM picked
        RETURNING id, gpu_id)
    SELECT picked.id, hostname, "index", nvlink_domain, uuid, held.id
    FROM picked JOIN held ON held.gpu_id = picked.id ORDER BY place
"""


def _free_gpus_sql(
    gpu_model: GpuModel, start: datetime, end: datetime, held_elsewhere
) -> tuple[str, list]:
    schedulable = (
        Gpu.objects.schedulable(at=start)
        .filter(model=gpu_model, mig_parent__isnull=True)
        .order_by()
        .values("id")
    )
    schedulable_sql, params = schedulable.query.sql_with_params()
    # As the ORM writes them: SQLite compares datetimes as text, naive UTC.
    start_value = connection.ops.adapt_datetimefield_value(start)
    end_value = connection.ops.adapt_datetimefield_value(end)
    held = sorted(held_elsewhere)
    sql = _FREE_GPUS.format(
        schedulable=schedulable_sql,
        booked=GPU_BOOKED_SQL.format(gpu_id="g.id", start="%s", end="%s"),
        held_elsewhere=f"AND g.id NOT IN ({', '.join(['%s'] * len(held))})" if held else "",
    )
    return sql, [*params, end_value, start_value, end_value, start_value, *held]


def _run(sql: str, params: list, *, after_lock: tuple[int, int] | None = None) -> list[GpuInfo]:
    return [
        GpuInfo(node=host, index=index, id=pk, nvlink_domain=domain or "", uuid=uuid)
        for pk, host, index, domain, uuid, _ in _rows(sql, params, after_lock=after_lock)
    ]


def _rows(sql: str, params: list, *, after_lock: tuple[int, int] | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        if after_lock is None:
            cursor.execute(sql, params)
        elif connection.settings_dict["OPTIONS"].get("server_side_binding"):
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(after_lock))
            cursor.execute(sql, params)
        else:
            # One round trip: the lock, then the read (its own statement, so it sees what
            # the lock's previous holder committed). Client-side binding sends both at once.
            cursor.execute(f"SELECT pg_advisory_xact_lock(%s, %s); {sql}", [*after_lock, *params])
            cursor.nextset()
        return cursor.fetchall()


@dataclass(frozen=True)
class FreeGpus:
    """The free GPUs of a model over [start, end), as SQL compiled before any lock is taken
    (compiling reads which powered-down nodes could be woken by the start)."""

    sql: str
    params: list

    @classmethod
    def of(
        cls, *, gpu_model: GpuModel, start: datetime, end: datetime, held_elsewhere=()
    ) -> "FreeGpus":
        """`held_elsewhere`: GPU ids running jobs hold over [start, end)."""
        return cls(*_free_gpus_sql(gpu_model, start, end, held_elsewhere))

    def on_best_fitting_node(
        self, count: int, *, after_lock: tuple[int, int] | None = None
    ) -> list[GpuInfo]:
        """The free GPUs of the node `pick_gpus` would book `count` GPUs on: the node with the
        fewest free GPUs that still has `count` (then by hostname). Empty when no node has
        `count` free GPUs. `after_lock`: a PostgreSQL advisory lock (namespace, key) to take
        first, in the same round trip."""
        return _run(
            _BEST_FITTING_NODE.format(free=self.sql),
            [*self.params, count],
            after_lock=after_lock,
        )

    def hold_on_best_fitting_node(
        self,
        count: int,
        *,
        reservation_id: int,
        start: datetime,
        end: datetime,
        guaranteed: int,
        after_lock: tuple[int, int] | None = None,
    ) -> list[tuple[int, GpuInfo]]:
        """PostgreSQL: pick `count` GPUs on the node `on_best_fitting_node` names, as
        `pick_gpus` over its free GPUs would, and hold them for the booking over [start, end)
        in the same statement (the first `guaranteed` at list price, the rest over quota).
        Returns (holding id, GPU) in pick order; empty, holding nothing, when no node has
        `count` free GPUs."""
        params = [*self.params, count, count, count, reservation_id, start, end, guaranteed]
        return [
            (
                holding_id,
                GpuInfo(node=host, index=index, id=pk, nvlink_domain=domain or "", uuid=uuid),
            )
            for pk, host, index, domain, uuid, holding_id in _rows(
                _PICK_AND_HOLD.format(free=self.sql), params, after_lock=after_lock
            )
        ]

    def all(self) -> list[GpuInfo]:
        """Every free GPU, for bookings no single node can take."""
        return _run(self.sql, self.params)
