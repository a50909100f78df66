"""Nodes in a replay: how long each sat fully idle and, with power saving, when it powered
down and woke. Pure Python, no Django.

Every replay keeps a ``NodeClock``: it counts the node-hours with no job on the node
(``idle_node_hours``: with power saving, off hours included, so it is what would have idled
without it). Given a ``PowerSaving`` (``apps.fleet.power_rules``, the rule the live policy
uses) it also runs the power model:

* a node fully idle for ``idle_seconds`` powers down when the rule allows it (warm reserve of
  idle powered-on GPUs per model, minimum on time, at most ``max_cycles_per_day`` power-downs
  in any 24 h); its GPUs leave the scheduler's pool at once;
* after each scheduling cycle, queued jobs that their team's quota lets start but that found no
  room wake powered-off nodes (``nodes_to_wake``); a woken node takes work ``resume_seconds``
  later. Off hours count until the wake request (a resuming node draws power).

``energy_saved_kwh`` = off node-hours x ``idle_watts`` / 1000. The replay has no bookings, so
no booking can start late: ``bookings_late`` is 0 and the result says why.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterable

from apps.fleet.power_rules import (
    DAY_SECONDS,
    Demand,
    NodePower,
    OffNode,
    PowerSaving,
    next_power_down_check,
    nodes_to_wake,
    power_down_refusal,
)
from apps.jobs.scheduler.state import GpuInfo, QueuedJob

ON, OFF, RESUMING = "on", "off", "resuming"
CHECK, RESUMED, WAKEABLE = 0, 1, 2  # timer kinds
NO_BOOKINGS = "replay has no bookings"
DEFAULT_IDLE_WATTS = 400.0


class _Node:
    __slots__ = (
        "name", "model", "gpu_ids", "busy", "idle_since", "state", "on_since", "off_since",
        "power_downs", "token",
    )  # fmt: skip

    def __init__(self, name: str, model: str, start: float) -> None:
        self.name, self.model = name, model
        self.gpu_ids: list[int] = []
        self.busy = 0
        self.idle_since: float | None = start
        self.state = ON
        self.on_since = start
        self.off_since = 0.0
        self.power_downs: list[float] = []
        self.token = 0  # bumped by every change: timers set before it are stale


class NodeClock:
    """Per node: GPUs held by jobs, idle time and, with ``saving``, power state; see the module
    docstring. ``withdraw(ids)`` / ``restore(ids)`` take a powered-down node's GPUs out of the
    scheduler's pool and give a resumed node's back."""

    def __init__(
        self,
        gpus: list[GpuInfo],
        start: float,
        saving: PowerSaving | None = None,
        idle_watts: float = DEFAULT_IDLE_WATTS,
        withdraw: Callable[[list[int]], None] = lambda ids: None,
        restore: Callable[[list[int]], None] = lambda ids: None,
    ) -> None:
        self.nodes: dict[str, _Node] = {}
        self.node_of: dict[int, _Node] = {}
        for g in gpus:
            node = self.nodes.get(g.node)
            if node is None:
                node = self.nodes[g.node] = _Node(g.node, g.model, start)
            node.gpu_ids.append(g.gpu_id)
            self.node_of[g.gpu_id] = node
        self.saving, self.idle_watts = saving, idle_watts
        self.withdraw, self.restore = withdraw, restore
        self.start = start
        self.idle_seconds = 0.0
        self.off_seconds = 0.0
        self.off_seconds_by_model: dict[str, float] = defaultdict(float)
        self.power_cycles = 0
        self.off_gpu_ids: set[int] = set()  # GPUs of nodes off or resuming
        self.off: dict[str, _Node] = {}
        self.resuming: dict[str, _Node] = {}
        self.idle_on: dict[str, int] = defaultdict(int)  # model -> idle GPUs on powered-on nodes
        for node in self.nodes.values():
            self.idle_on[node.model] += len(node.gpu_ids)
        self.timers: list[tuple[float, int, int, str, int]] = []  # (at, seq, kind, node, token)
        self._seq = 0
        self.blocked: dict[str, set[str]] = defaultdict(set)  # model -> idle nodes kept on
        self.grew: set[str] = set()  # models whose idle powered-on GPUs grew since last look
        if saving is not None:
            for node in self.nodes.values():
                self._schedule_check(node)

    # -- jobs on nodes -------------------------------------------------------------------------

    def occupy(self, gpu_ids: Iterable[int], at: float) -> None:
        for gid in gpu_ids:
            node = self.node_of[gid]
            if node.busy == 0:
                self.idle_seconds += at - node.idle_since
                node.idle_since = None
                node.token += 1
                self.blocked[node.model].discard(node.name)
            node.busy += 1
            self.idle_on[node.model] -= 1

    def release(self, gpu_ids: Iterable[int], at: float) -> None:
        for gid in gpu_ids:
            node = self.node_of[gid]
            node.busy -= 1
            self.idle_on[node.model] += 1
            self.grew.add(node.model)
            if node.busy == 0:
                node.idle_since = at
                if self.saving is not None:
                    self._schedule_check(node)

    # -- power ---------------------------------------------------------------------------------

    def next_at(self) -> float:
        """When the next power timer is due (a node may power down, resumes, or may be
        woken); ``inf`` without one."""
        timers, nodes = self.timers, self.nodes
        while timers and timers[0][4] != nodes[timers[0][3]].token:
            heapq.heappop(timers)
        return timers[0][0] if timers else math.inf

    def pending(self, now: float) -> bool:
        """Whether a node is resuming or is off too briefly to be woken yet: queued work that
        found no room may be waiting for it."""
        if self.resuming:
            return True
        min_off = self.saving.min_off_seconds if self.saving is not None else 0.0
        return any(now - node.off_since < min_off for node in self.off.values())

    def resume_due(self, now: float) -> None:
        """Nodes whose resume time is up take work again (before the cycle)."""
        for node in self._due(now, RESUMED):
            del self.resuming[node.name]
            node.state, node.on_since = ON, now
            node.token += 1
            self.off_gpu_ids.difference_update(node.gpu_ids)
            self.idle_on[node.model] += len(node.gpu_ids)
            self.grew.add(node.model)
            self.restore(node.gpu_ids)
            self._schedule_check(node)

    def after_cycle(self, now: float, queue: Iterable[QueuedJob], room) -> None:
        """Power down the nodes whose time came (after the cycle, so that arriving work takes
        them first), then wake nodes for queued work that found no room. ``room(team, model)``:
        GPUs of the model the team's quota lets it take now."""
        if self.saving is None:
            return
        due = self._due(now, CHECK)
        self._due(now, WAKEABLE)  # only an event: the wake pass below looks again
        for model in self.grew:
            due.extend(self.nodes[name] for name in self.blocked[model])
        self.grew.clear()
        for node in sorted(set(due), key=lambda n: (n.idle_since or 0.0, n.name)):
            if node.state == ON and node.idle_since is not None:
                self._consider_power_down(node, now)
        if self.off and queue:
            self._wake(now, queue, room)

    def _consider_power_down(self, node: _Node, now: float) -> None:
        saving = self.saving
        recent = tuple(node.power_downs[-saving.max_cycles_per_day :])
        view = NodePower(
            node.name, node.model, len(node.gpu_ids), node.idle_since, node.on_since, recent
        )
        later = next_power_down_check(view, saving)
        if later is not None and later > now:
            self.blocked[node.model].discard(node.name)
            self._push(later, CHECK, node)
            return
        if power_down_refusal(view, now, saving, self.idle_on[node.model]) is not None:
            self.blocked[node.model].add(node.name)  # the warm reserve: looked at again later
            return
        self.blocked[node.model].discard(node.name)
        node.state, node.off_since = OFF, now
        node.token += 1
        node.power_downs.append(now)
        self.power_cycles += 1
        self.off[node.name] = node
        self.off_gpu_ids.update(node.gpu_ids)
        self.idle_on[node.model] -= len(node.gpu_ids)
        self.withdraw(node.gpu_ids)
        if saving.min_off_seconds > 0:
            self._push(now + saving.min_off_seconds, WAKEABLE, node)

    def _wake(self, now: float, queue: Iterable[QueuedJob], room) -> None:
        """Wake nodes for the queued jobs their quota lets start, in queue order, until the
        demand covers every GPU that is off or resuming."""
        off_gpus = sum(len(n.gpu_ids) for n in self.off.values())
        resuming: dict[str, int] = defaultdict(int)
        for node in self.resuming.values():
            resuming[node.model] += len(node.gpu_ids)
        enough = off_gpus + sum(resuming.values())
        models = sorted({n.model for n in self.nodes.values()})
        demands, asked = [], 0
        for job in queue:
            accepted = [
                m
                for m in ([job.gpu_model] if job.gpu_model is not None else models)
                if room(job.team, m) >= job.gpu_count
            ]
            if not accepted:
                continue
            demands.append(Demand(job.gpu_count, accepted[0] if len(accepted) == 1 else None))
            asked += job.gpu_count
            if asked >= enough:
                break
        if not demands:
            return
        off = [OffNode(n.name, n.model, len(n.gpu_ids), n.off_since) for n in self.off.values()]
        for name in nodes_to_wake(demands, off, resuming, now, self.saving):
            node = self.off.pop(name)
            self.off_seconds += now - node.off_since
            self.off_seconds_by_model[node.model] += now - node.off_since
            node.state = RESUMING
            node.token += 1
            self.resuming[name] = node
            self._push(now + self.saving.resume_seconds, RESUMED, node)

    def _schedule_check(self, node: _Node) -> None:
        node.token += 1
        self._push(max(node.idle_since or 0.0, node.on_since) + self.saving.idle_seconds,
                   CHECK, node)  # fmt: skip

    def _push(self, at: float, kind: int, node: _Node) -> None:
        self._seq += 1
        heapq.heappush(self.timers, (at, self._seq, kind, node.name, node.token))

    def _due(self, now: float, kind: int) -> list[_Node]:
        """Pop the current timers of ``kind`` due by ``now`` (and stale ones on the way)."""
        timers, nodes, due, keep = self.timers, self.nodes, [], []
        while timers and timers[0][0] <= now:
            entry = heapq.heappop(timers)
            node = nodes[entry[3]]
            if entry[4] != node.token:
                continue
            (due if entry[2] == kind else keep).append(node if entry[2] == kind else entry)
        for entry in keep:
            heapq.heappush(timers, entry)
        return due

    # -- results -------------------------------------------------------------------------------

    def totals(self, end: float) -> dict:
        """The replay's node figures at ``end`` (open idle and off stretches closed there)."""
        idle = self.idle_seconds + sum(
            max(0.0, end - n.idle_since) for n in self.nodes.values() if n.idle_since is not None
        )
        off = self.off_seconds + sum(max(0.0, end - n.off_since) for n in self.off.values())
        off_by_model: dict[str, float] = defaultdict(float)
        for node in self.off.values():
            off_by_model[node.model] += max(0.0, end - node.off_since)
        for model, seconds in self.off_seconds_by_model.items():
            off_by_model[model] += seconds
        per_day: dict[tuple[str, int], int] = defaultdict(int)
        for node in self.nodes.values():
            for at in node.power_downs:
                per_day[node.name, int((at - self.start) // DAY_SECONDS)] += 1
        return {
            "idle_node_hours": idle / 3600,
            "node_hours_off": off / 3600,
            "energy_saved_kwh": off / 3600 * self.idle_watts / 1000,
            "energy_saved_kwh_by_model": {
                model: seconds / 3600 * self.idle_watts / 1000
                for model, seconds in sorted(off_by_model.items())
            },
            "power_cycles": self.power_cycles,
            "max_cycles_per_node_day": max(per_day.values(), default=0),
            "bookings_late": 0,
            "bookings_late_reason": NO_BOOKINGS,
            "power_saving": None if self.saving is None else {
                "idle_seconds": self.saving.idle_seconds,
                "resume_seconds": self.saving.resume_seconds,
                "warm_gpus": self.saving.warm_gpus,
                "max_cycles_per_day": self.saving.max_cycles_per_day,
                "min_on_seconds": self.saving.min_on_seconds,
                "min_off_seconds": self.saving.min_off_seconds,
                "idle_watts": self.idle_watts,
            },
        }  # fmt: skip
