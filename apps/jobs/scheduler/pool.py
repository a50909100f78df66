"""The free-GPU index the scheduler places jobs from. Pure Python, no Django.

``FreePool`` keeps, per GPU model, each node's free GPU ids (sorted) and the nodes by free
count, so taking or giving back a job's GPUs costs O(job size) and finding room for a gang
costs O(GPUs per node) for one node. The trace replayer keeps one pool for a whole replay;
``schedule()`` builds one per cycle. Either way every choice depends only on which GPUs are
free, never on the order they became free, so both give the same placements.

GPUs that are free now but booked by a reservation later sit apart (``booked``): a job may use
them (backfill) only when its ``max_runtime`` ends before the booking starts.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from apps.jobs.scheduler.state import GpuInfo


class FreePool:
    def __init__(self, gpus: list[GpuInfo]) -> None:
        self.info: dict[int, GpuInfo] = {g.gpu_id: g for g in gpus}
        self.free: dict[str, dict[str, list[int]]] = defaultdict(dict)
        self.node_size: dict[tuple[str, str], int] = defaultdict(int)
        self.capacity: dict[str, int] = defaultdict(int)
        self.domain_of: dict[str, str | None] = {}
        self.rack_of: dict[str, str | None] = {}
        for g in gpus:
            self.free[g.model].setdefault(g.node, [])
            self.node_size[g.model, g.node] += 1
            self.capacity[g.model] += 1
            self.domain_of.setdefault(g.node, g.nvlink_domain)
            self.rack_of.setdefault(g.node, g.rack)
        self.largest: dict[str, int] = defaultdict(int)
        for (model, _), size in self.node_size.items():
            self.largest[model] = max(self.largest[model], size)
        # by_count[model][c]: nodes with exactly c free GPUs of the model (c >= 1)
        self.by_count: dict[str, list[set[str]]] = {
            m: [set() for _ in range(self.largest[m] + 1)] for m in self.capacity
        }
        self.total: dict[str, int] = defaultdict(int)
        self.free_count = 0
        # booked[model][node]: sorted (booking start, gpu id), free now but booked later
        self.booked: dict[str, dict[str, list[tuple[float, int]]]] = defaultdict(dict)
        self.booked_count = 0
        self.models = sorted(self.capacity)
        for g in sorted(gpus, key=lambda g: g.gpu_id):
            self.give((g.gpu_id,))

    # -- changes ---------------------------------------------------------------------------

    def _move(self, model: str, node: str, before: int, after: int) -> None:
        counts = self.by_count[model]
        if before:
            counts[before].discard(node)
        if after:
            counts[after].add(node)

    def give(self, gpu_ids) -> None:
        """Put GPUs back in the pool (a job ended or was stopped)."""
        for gid in gpu_ids:
            g = self.info[gid]
            ids = self.free[g.model][g.node]
            bisect.insort(ids, gid)
            self._move(g.model, g.node, len(ids) - 1, len(ids))
            self.total[g.model] += 1
            self.free_count += 1

    def take(self, gpu_ids) -> None:
        """Remove GPUs from the pool (placed, or held by an active booking)."""
        for gid in gpu_ids:
            g = self.info[gid]
            ids = self.free[g.model][g.node]
            k = bisect.bisect_left(ids, gid)
            if k < len(ids) and ids[k] == gid:
                del ids[k]
                self._move(g.model, g.node, len(ids) + 1, len(ids))
                self.total[g.model] -= 1
                self.free_count -= 1
                continue
            booked = self.booked[g.model].get(g.node)
            for i, (_, b) in enumerate(booked or ()):
                if b == gid:
                    del booked[i]
                    self.booked_count -= 1
                    break

    def set_aside_booked(self, gpu_id: int, start: float) -> None:
        """A free GPU that a reservation books from ``start``: backfill only."""
        g = self.info[gpu_id]
        ids = self.free[g.model][g.node]
        k = bisect.bisect_left(ids, gpu_id)
        if k < len(ids) and ids[k] == gpu_id:
            self.take((gpu_id,))
            bisect.insort(self.booked[g.model].setdefault(g.node, []), (start, gpu_id))
            self.booked_count += 1

    # -- queries ---------------------------------------------------------------------------

    def exhausted(self) -> bool:
        return self.free_count == 0 and self.booked_count == 0

    def has_booked(self, model: str) -> bool:
        return any(self.booked.get(model, {}).values())

    def max_free_on_node(self, model: str) -> int:
        counts = self.by_count.get(model)
        if not counts:
            return 0
        for c in range(len(counts) - 1, 0, -1):
            if counts[c]:
                return c
        return 0

    def fits(self, model: str, count: int, same_node: bool) -> bool:
        """Room for the gang among GPUs free now and not booked (exact when nothing is booked)."""
        if same_node:
            return self.max_free_on_node(model) >= count
        return self.total.get(model, 0) >= count

    def _pick_on_node(self, ids: list[int], count: int) -> list[int]:
        """``count`` GPUs of one node, from one NVLink domain when one has enough."""
        if len(ids) == count:
            return list(ids)
        domains: dict[str | None, list[int]] = defaultdict(list)
        for gid in ids:
            domains[self.info[gid].nvlink_domain].append(gid)
        if len(domains) > 1:
            fitting = [d for d in domains.values() if len(d) >= count]
            if fitting:
                return min(fitting, key=lambda d: (len(d), d[0]))[:count]
        return ids[:count]

    def _usable_booked(self, model: str, node: str, deadline: float) -> list[int]:
        return sorted(gid for start, gid in self.booked[model].get(node, ()) if start >= deadline)

    def find(
        self, model: str, count: int, same_node: bool, deadline: float, avoid=None
    ) -> list[int] | None:
        """GPUs for a gang of ``count`` on ``model`` that may run until ``deadline``, or None.
        Does not take them. One node if one has room (best fit: the fewest free GPUs that
        suffice, keeping whole nodes for big jobs; nodes for which ``avoid(node)`` is true only
        when no other has room); otherwise, unless ``same_node``, the fewest nodes (most free
        GPUs first), one NVLink domain when that needs no more nodes, else one rack when that
        needs no more nodes."""
        counts = self.by_count.get(model)
        if counts is None:
            return None
        fallback = None
        for c in range(count, len(counts)):
            nodes = counts[c]
            if not nodes:
                continue
            if avoid is None:
                return self._pick_on_node(self.free[model][min(nodes)], count)
            welcome = [n for n in nodes if not avoid(n)]
            if welcome:
                return self._pick_on_node(self.free[model][min(welcome)], count)
            if fallback is None:
                fallback = min(nodes)
        if fallback is not None:
            return self._pick_on_node(self.free[model][fallback], count)
        per_node: dict[str, list[int]] = {}
        extra: dict[str, list[int]] = {}
        for node in self.booked.get(model, {}):
            usable = self._usable_booked(model, node, deadline)
            if usable:
                extra[node] = usable
        if extra:
            # Backfill: booked GPUs whose booking starts after the job would end.
            free = self.free[model]
            fitting = [n for n, ids in extra.items() if len(free[n]) + len(ids) >= count]
            if fitting:
                node = min(fitting, key=lambda n: (len(free[n]) + len(extra[n]), n))
                return self._pick_on_node(sorted(free[node] + extra[node]), count)
        if same_node:
            return None
        if self.total.get(model, 0) + sum(len(ids) for ids in extra.values()) < count:
            return None
        per_node = {
            node: self.free[model][node]
            for c in range(len(counts) - 1, 0, -1)
            for node in counts[c]
        }
        for node, ids in extra.items():
            per_node[node] = sorted(per_node.get(node, []) + ids)
        return self._spread(per_node, count)

    def _spread(self, per_node: dict[str, list[int]], count: int) -> list[int] | None:
        if sum(len(ids) for ids in per_node.values()) < count:
            return None

        def greedy(nodes: list[str]) -> list[int] | None:
            picks: list[int] = []
            for node in sorted(nodes, key=lambda n: (-len(per_node[n]), n)):
                picks.extend(per_node[node][: count - len(picks)])
                if len(picks) == count:
                    return picks
            return None

        best = greedy(list(per_node))
        fewest = len({self.info[g].node for g in best}) if best else 0
        # Among the placements on the fewest nodes: one NVLink domain, else one rack.
        for group_of in (self.domain_of, self.rack_of):
            groups: dict[str, list[str]] = defaultdict(list)
            for node in per_node:
                group = group_of.get(node)
                if group is not None:
                    groups[group].append(node)
            for group in sorted(groups):
                if sum(len(per_node[node]) for node in groups[group]) < count:
                    continue  # too few free GPUs in the group: greedy would find nothing
                picks = greedy(groups[group])
                if picks is not None and len({self.info[g].node for g in picks}) <= fewest:
                    return picks
        return best

    def fits_ignoring_bookings(self, model: str, count: int, same_node: bool) -> bool:
        sizes = [
            len(ids) + len(self.booked.get(model, {}).get(node, ()))
            for node, ids in self.free.get(model, {}).items()
        ]
        if same_node:
            return any(s >= count for s in sizes)
        return sum(sizes) >= count
