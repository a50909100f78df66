"""The spare pool (core's docstring, step 3): capacity beyond the guarantees, shared by weighted
fair share, least attained service (Tiresias) or slowdown. A mixin of ``Engine``."""

from __future__ import annotations

import bisect
import heapq

from apps.jobs.scheduler.config import (
    TIRESIAS_BOUNDS,
)
from apps.jobs.scheduler.modes import SPARE, Candidate
from apps.jobs.scheduler.state import (
    QueuedJob,
)


class SpareMixin:
    def _spare(self) -> None:
        """The GPUs left, in ``config.spare_order``: by default the lowest effective share
        first (weighted fair share)."""
        if self.pool.exhausted():
            return
        order = self.config.spare_order
        if order == "share":
            # The share with the head job's aging (queue key = (level, turn, id)); the
            # candidate's own share is checked when the team comes up.
            heap = [
                (self._share_at(team, key[1]), team, None)
                for team in self._teams()
                if (key := self._head_key(team))
            ]
        elif order in ("las", "tiresias"):
            # Lower bound: nothing run yet, the oldest job.
            heap = [
                ((0.0, key), team, None) for team in self._teams() if (key := self._head_key(team))
            ]
        else:
            heap = [
                (self._spare_key(team, cand), team, cand)
                for team in self._teams()
                if (cand := self._candidate(team, SPARE)) is not None
            ]
        if self.units.active and order in ("share", "las", "tiresias"):
            # Nearest idle guarantee first (``units``): every team starts at the lowest
            # distance and is pushed back to its own when it comes up.
            heap = [((0, key), team, cand) for key, team, cand in heap]
        heapq.heapify(heap)
        while heap and not self.pool.exhausted():
            share, team, cand = heapq.heappop(heap)
            if cand is None or not self._still_fits(cand):
                cand = self._candidate(team, SPARE)
                if cand is None:
                    continue
                now_share = self._spare_key(team, cand)
                if now_share != share:
                    heapq.heappush(heap, (now_share, team, cand))
                    continue
            self._place(cand, self._over(cand, SPARE))
            cand = self._candidate(team, SPARE)
            if cand is not None:
                heapq.heappush(heap, (self._spare_key(team, cand), team, cand))

    def _spare_key(self, team: str, cand: Candidate):
        """Where the team's candidate stands in the spare pool (lowest first): with units,
        the nearest idle guarantee first (``units.borrow_distance``), then the order."""
        if self.units.active:
            return (self.units.borrow_distance(team, cand.model), self._order_key(team, cand))
        return self._order_key(team, cand)

    def _order_key(self, team: str, cand: Candidate):
        order = self.config.spare_order
        job = cand.job
        if order == "share":
            return self._share_at(team, job.queued_since)
        if order == "las":
            return (job.attained, cand.key)
        if order == "tiresias":
            return (bisect.bisect_left(TIRESIAS_BOUNDS, job.attained), cand.key)
        runtime = max(job.max_runtime, 10.0)
        return -(self.now - job.submitted_at + runtime) / runtime

    def _share(self, team: str, job: QueuedJob) -> float:
        return self._share_at(team, job.queued_since)

    def _share_at(self, team: str, submitted_at: float) -> float:
        weight = max(1.0, self.quotas.weight.get(team, 0.0))
        history = self.usage.get(team, 0.0) / (
            self.total_capacity * self.config.usage_half_life_seconds
        )
        now_share = self.team_gpus[team] / self.total_capacity
        aging = self.config.aging_per_hour / 3600.0
        return (history + now_share) / weight - aging * (self.now - submitted_at)
