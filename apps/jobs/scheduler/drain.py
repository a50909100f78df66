"""Draining ahead (core's docstring, step 4): a gang within its team's guarantee that needs a
whole node gets the node that will have room soonest; no over-quota work starts there while it
waits. A mixin of ``Engine``."""

from __future__ import annotations

import math

from apps.jobs.scheduler.modes import GUARANTEE, Candidate
from apps.jobs.scheduler.state import (
    QueuedJob,
)


class DrainMixin:
    def _drain(self) -> list[int]:
        """Lead-time draining for guarantees that need room: for each team's oldest job within
        its guarantee that does not fit in the free GPUs, hold free GPUs back from the spare
        pass (over-quota work) so they add up instead of being lent again (``_drain_ids``).
        Recomputed every cycle from the state alone. Returns the GPUs held back (the caller
        gives them back)."""
        withheld: list[int] = []
        taken: set[str] = set()
        for team, cand in self._drain_candidates():
            ids = self._drain_ids(team, cand, taken)
            if ids:
                self.pool.take(ids)
                withheld.extend(ids)
        return withheld

    def _drain_nodes(self) -> frozenset[str]:
        """The nodes ``_drain`` would drain now for jobs that need one whole node, without
        holding anything back: the guarantee pass places other work elsewhere when it can."""
        taken: set[str] = set()
        for team, cand in self._drain_candidates():
            if cand.job.same_node:
                self._drain_ids(team, cand, taken)
        return frozenset(taken)

    def _drain_candidates(self):
        """(team, its oldest job within its guarantee that does not fit the free GPUs), team
        by team, each found when its turn comes (after the teams before it took their GPUs) and
        kept for the cycle unless the team's quota changes later in it."""
        for team in sorted(self.buckets):
            if self._caps(team, GUARANTEE) is None:
                continue
            cand = self._drain_cands.get(team, False)
            if cand is False:
                cand = self._candidate(team, GUARANTEE, fitting=False)
                if team not in self.quotas.later:
                    self._drain_cands[team] = cand
            if cand is not None:
                yield team, cand

    def _drain_ids(self, team: str, cand: Candidate, taken: set[str]) -> list[int]:
        """The free GPUs to hold back for ``cand`` (none when it fits now). A job that needs
        one node gets the node that will have room soonest (free GPUs now, over-quota work of
        other teams once it may be preempted, the rest at its runtime limit), of any model the
        job accepts and its guarantee covers; a job that may span nodes gets free GPUs of its
        model up to its size. Nodes in ``taken`` drain for others; the chosen ones join."""
        pool = self.pool
        job, model = cand.job, cand.model
        if job.gpu_model is None and len(pool.models) > 1:
            # A job of any model drains on the model whose node has room soonest; next
            # cycle's guarantee pass finds the room on whichever model it is.
            caps = self._caps(team, GUARANTEE) or {}
            models = [m for m in pool.models if caps.get(m, 0) >= job.gpu_count]
        else:
            models = [model]
        if any(pool.fits(m, job.gpu_count, job.same_node) for m in models):
            return []
        if job.same_node:
            best = None
            for m in models:
                key = self._drain_node_key(job, m, taken)
                if key is not None and (best is None or key < best[0]):
                    best = (key, m)
            if best is None:
                return []
            model, node = best[1], best[0][2]
            taken.add(node)
            return list(pool.free[model].get(node, ()))
        ids: list[int] = []
        by_size = sorted(pool.free[model].items(), key=lambda kv: (-len(kv[1]), kv[0]))
        for node, free in by_size:
            if node in taken or not free:
                continue
            taken.add(node)
            ids.extend(free[: job.gpu_count - len(ids)])
            if len(ids) >= job.gpu_count:
                break
        return ids

    def _drain_node(self, job: QueuedJob, model: str, taken: set[str]) -> str | None:
        """The node of ``model`` (big enough, not drained for another job) where ``job`` would
        find room soonest; ties: the most free GPUs now, then the name."""
        key = self._drain_node_key(job, model, taken)
        return key[2] if key is not None else None

    def _drain_node_key(self, job: QueuedJob, model: str, taken: set[str]) -> tuple | None:
        """(when it has room, -free GPUs now, node) of ``_drain_node``'s node, or None. Each
        node's key is worked out once per job and state (``_node_keys``): the cycle asks
        before the guarantee pass (``_drain_nodes``) and again after it (``_drain``), and
        unless that pass placed something the answer is the same. (The GPUs ``_drain`` holds
        back are on nodes in ``taken`` while held, and back before the next question.)"""
        pool = self.pool
        stamp = (self.version, self.now)
        if self._node_keys_at != stamp:
            self._node_keys_at = stamp
            self._node_keys = {}
        keys = self._node_keys.get((job.job_id, model))
        if keys is None:
            keys = self._node_keys[job.job_id, model] = {}
        best = None
        for node in pool.free[model]:
            if node in taken or pool.node_size[model, node] < job.gpu_count:
                continue
            key = keys.get(node)
            if key is None:
                key = keys[node] = self._node_ready(job, model, node)
            if best is None or key < best:
                best = key
        return best if best is not None and best[0] < math.inf else None

    def _node_ready(self, job: QueuedJob, model: str, node: str) -> tuple:
        """(when ``node`` has room for ``job``, -free GPUs now, node): free GPUs now, over-quota
        work of other teams once it may be preempted, the rest at its runtime limit."""
        running, now = self.running, self.now
        min_runtime = self.config.preempt_min_runtime_seconds
        free = self.pool.free[model][node]
        have = len(free)
        releases = []
        for jid in self.on_node.get(node, ()):
            r = running[jid]
            if r.model != model:
                continue
            # A gang that would lose work yields last (``_costly_gang``): the node to
            # drain is one whose other work ends or yields, not the gang's.
            if jid in self.preemptible and r.team != job.team and not self._costly_gang(r):
                at = max(now, r.started_at + min_runtime)
            else:
                at = r.started_at + r.max_runtime
            releases.append((at, self.spread[jid][node]))
        ready = now
        if have < job.gpu_count:
            ready = math.inf
            for at, n in sorted(releases):
                have += n
                if have >= job.gpu_count:
                    ready = at
                    break
        return (ready, -len(free), node)
