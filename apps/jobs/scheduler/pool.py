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
import heapq
from collections import defaultdict
from collections.abc import Iterable

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
            self.free[g.model].setdefault(g.node, []).append(g.gpu_id)
            self.node_size[g.model, g.node] += 1
            self.capacity[g.model] += 1
            self.domain_of.setdefault(g.node, g.nvlink_domain)
            self.rack_of.setdefault(g.node, g.rack)
        self.largest: dict[str, int] = defaultdict(int)
        for (model, _), size in self.node_size.items():
            self.largest[model] = max(self.largest[model], size)
        # by_count[model][c]: nodes with exactly c free GPUs of the model (c >= 1), sorted by
        # name: best fit takes the first name of the smallest count that suffices
        self.by_count: dict[str, list[list[str]]] = {
            m: [[] for _ in range(self.largest[m] + 1)] for m in self.capacity
        }
        # Per model, the nodes of each NVLink domain / rack (names sorted) and the free GPUs
        # there, kept as GPUs come and go: a gang spread over nodes looks for a domain or rack
        # with room without counting every node's free GPUs again (``_spread``).
        self.groups: dict[str, tuple[dict[str, list[str]], dict[str, list[str]]]] = {}
        self.group_free: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
        for model, nodes in self.free.items():
            domains: dict[str, list[str]] = defaultdict(list)
            racks: dict[str, list[str]] = defaultdict(list)
            for node in sorted(nodes):
                if self.domain_of[node] is not None:
                    domains[self.domain_of[node]].append(node)
                if self.rack_of[node] is not None:
                    racks[self.rack_of[node]].append(node)
            self.groups[model] = (
                {d: domains[d] for d in sorted(domains)},
                {r: racks[r] for r in sorted(racks)},
            )
            self.group_free[model] = (dict.fromkeys(domains, 0), dict.fromkeys(racks, 0))
        self.total: dict[str, int] = defaultdict(int)
        self.free_count = 0
        # booked[model][node]: sorted (booking start, gpu id), free now but booked later
        self.booked: dict[str, dict[str, list[tuple[float, int]]]] = defaultdict(dict)
        self.booked_count = 0
        self.models = sorted(self.capacity)
        # Every GPU starts free: the same state as giving them back one by one, built per
        # node at once (a live cycle builds a pool of the whole fleet).
        for model, nodes in self.free.items():
            for node, ids in nodes.items():
                ids.sort()
                self._move(model, node, 0, len(ids))
                self.total[model] += len(ids)
                self.free_count += len(ids)

    # -- changes ---------------------------------------------------------------------------

    def _move(self, model: str, node: str, before: int, after: int) -> None:
        counts = self.by_count[model]
        if before:
            nodes = counts[before]
            del nodes[bisect.bisect_left(nodes, node)]
        if after:
            bisect.insort(counts[after], node)
        domains, racks = self.group_free[model]
        domain, rack = self.domain_of[node], self.rack_of[node]
        if domain is not None:
            domains[domain] += after - before
        if rack is not None:
            racks[rack] += after - before

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
                return self._pick_on_node(self.free[model][nodes[0]], count)
            welcome = next((n for n in nodes if not avoid(n)), None)
            if welcome is not None:
                return self._pick_on_node(self.free[model][welcome], count)
            if fallback is None:
                fallback = nodes[0]
        if fallback is not None:
            return self._pick_on_node(self.free[model][fallback], count)
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
        return self._spread(model, count, extra)

    def _spread(self, model: str, count: int, extra: dict[str, list[int]]) -> list[int] | None:
        """A gang over several nodes: greedy on the nodes with the most usable GPUs (free,
        plus ``extra``: booked ones it may backfill), names breaking ties, which takes the
        fewest nodes; the first NVLink domain, else rack, (by name) where greedy needs no
        more nodes wins over it. The caller made sure enough GPUs are usable."""
        free = self.free[model]

        def usable(node: str) -> list[int]:
            more = extra.get(node)
            return free[node] if more is None else sorted(free[node] + more)

        found = self._fewest_nodes(model, count, extra, usable)
        if found is None:
            return None
        best, fewest = found
        # Among the placements on the fewest nodes: one NVLink domain, else one rack.
        for group_of, members, group_free in zip(
            (self.domain_of, self.rack_of), self.groups[model], self.group_free[model], strict=True
        ):
            if not members:
                continue
            bonus: dict[str, int] = defaultdict(int)  # backfill GPUs per group
            for node, ids in extra.items():
                if (group := group_of[node]) is not None:
                    bonus[group] += len(ids)
            if max(group_free.values()) + sum(bonus.values()) < count:
                continue  # no group has room (say, domains smaller than the gang)
            for group, nodes in members.items():
                if group_free[group] + bonus.get(group, 0) < count:
                    continue  # too few usable GPUs in the group: greedy would find nothing
                picks: list[int] = []
                # the group's nodes, most usable GPUs first (names break ties)
                for used, node in enumerate(sorted(nodes, key=lambda n: (-len(usable(n)), n)), 1):
                    if used > fewest:
                        break
                    picks.extend(usable(node)[: count - len(picks)])
                    if len(picks) == count:
                        return picks
        return best

    def _fewest_nodes(
        self, model: str, count: int, extra: dict[str, list[int]], usable
    ) -> tuple[list[int], int] | None:
        """Greedy over all nodes of ``model``, most usable GPUs first, names breaking ties:
        its picks and how many nodes they take (the fewest possible). Walks the free counts
        from the top (``by_count``, names sorted) and takes the first names of each count."""
        counts = self.by_count[model]
        # nodes whose usable GPUs are not their free count (booked GPUs to backfill)
        moved = {node: len(self.free[model][node]) + len(ids) for node, ids in extra.items()}
        picks: list[int] = []
        nodes = 0
        for c in range(len(counts) - 1, 0, -1):
            level: Iterable[str] = counts[c]
            if moved:
                level = heapq.merge(
                    (n for n in level if n not in moved),
                    sorted(n for n, k in moved.items() if k == c),
                )
            for node in level:
                picks.extend(usable(node)[: count - len(picks)])
                nodes += 1
                if len(picks) == count:
                    return picks, nodes
        return None

    def fits_ignoring_bookings(self, model: str, count: int, same_node: bool) -> bool:
        sizes = [
            len(ids) + len(self.booked.get(model, {}).get(node, ()))
            for node, ids in self.free.get(model, {}).items()
        ]
        if same_node:
            return any(s >= count for s in sizes)
        return sum(sizes) >= count
