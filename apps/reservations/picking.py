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

_FREE_GPUS = """
    SELECT g.id, n.hostname, g."index", g.nvlink_domain, g.uuid, g.node_id
    FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id
    WHERE g.id IN ({schedulable})
      AND NOT {booked}
      AND NOT EXISTS (
          SELECT 1 FROM fleet_maintenancewindow w
          WHERE w.node_id = g.node_id AND w.start < %s AND w."end" > %s)
      {held_elsewhere}
"""

_BEST_FITTING_NODE = """
    WITH free AS ({free})
    SELECT id, hostname, "index", nvlink_domain, uuid, node_id FROM free
    WHERE node_id = (
        SELECT node_id FROM free GROUP BY node_id, hostname HAVING COUNT(*) >= %s
        ORDER BY COUNT(*), hostname LIMIT 1)
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
        rows = cursor.fetchall()
    return [
        GpuInfo(node=host, index=index, id=pk, nvlink_domain=domain or "", uuid=uuid)
        for pk, host, index, domain, uuid, _node_id in rows
    ]


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

    def all(self) -> list[GpuInfo]:
        """Every free GPU, for bookings no single node can take."""
        return _run(self.sql, self.params)
