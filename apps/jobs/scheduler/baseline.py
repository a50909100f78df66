"""The baselines ``fifo`` and ``sjf`` (first fit in queue order within quota limits, nothing
else), and jobs bound to an active booking (step 1). A mixin of ``Engine``."""

from __future__ import annotations

import heapq
from collections import defaultdict

from apps.jobs.scheduler.config import queue_order_key
from apps.jobs.scheduler.explain import gpus_phrase
from apps.jobs.scheduler.modes import GUARANTEE, Candidate
from apps.jobs.scheduler.state import (
    Pending,
    PendingReason,
)


class BaselineMixin:
    def _by_order(self, mode: str) -> None:
        """Place jobs of all teams in queue order (oldest first / shortest first)."""
        if self.pool.exhausted():
            return
        # Each team enters with a lower bound of its candidate (its oldest queued job); the
        # real candidate is computed when the team comes up, so a cycle with little to place
        # looks at a few teams only.
        # A team is in the heap once, as (key, team, candidate found or None).
        if mode == GUARANTEE:  # teams at their guarantee have nothing to place in this pass
            heap = [
                (key, team, None)
                for team in self._teams()
                if (key := self._head_key(team)) and self._caps(team, mode) is not None
            ]
        else:
            heap = [(key, team, None) for team in self._teams() if (key := self._head_key(team))]
        heapq.heapify(heap)
        while heap and not self.pool.exhausted():
            key, team, cand = heapq.heappop(heap)
            if cand is None or not self._still_fits(cand):
                cand = self._candidate(team, mode)
                if cand is None:
                    continue
                if cand.key != key:
                    heapq.heappush(heap, (cand.key, team, cand))
                    continue
            self._place(cand, self._over(cand, mode))
            cand = self._candidate(team, mode)  # None at once when the pool is exhausted
            if cand is not None:
                heapq.heappush(heap, (cand.key, team, cand))

    def _reservations(self) -> None:
        for job in sorted(self.reservation_jobs.values(), key=queue_order_key("fifo")):
            if job.reservation_id not in self.active_bookings:
                self.explained[job.job_id] = Pending(
                    job.job_id,
                    PendingReason.RESERVATION_NOT_ACTIVE,
                    "Its reservation is not active now; the job runs only inside it.",
                )
                continue
            gpus = [
                g
                for g in self.active_bookings[job.reservation_id]
                if g not in self.busy and g in self.pool.info
            ]
            model_of = {g: self.pool.info[g].model for g in gpus}
            placed = False
            for model in sorted({m for m in model_of.values() if job.gpu_model in (None, m)}):
                ids = [g for g in gpus if model_of[g] == model]
                if len(ids) < job.gpu_count:
                    continue
                picks = ids[: job.gpu_count]
                if job.same_node:
                    by_node: dict[str, list[int]] = defaultdict(list)
                    for g in ids:
                        by_node[self.pool.info[g].node].append(g)
                    fitting = [v for v in by_node.values() if len(v) >= job.gpu_count]
                    if not fitting:
                        continue
                    picks = min(fitting, key=len)[: job.gpu_count]
                self._place(Candidate((), job, model, picks), False)
                placed = True
                break
            if not placed:
                self.explained[job.job_id] = Pending(
                    job.job_id,
                    PendingReason.NO_CAPACITY,
                    f"Its reservation has no {gpus_phrase(job.gpu_count, job.gpu_model)} left now.",
                )
