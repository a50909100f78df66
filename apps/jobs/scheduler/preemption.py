"""Preemption a loaded cluster can live with (see core's docstring, step 4): bounded by a
minimum runtime, a cap per job and a loss budget, only when the waiting job starts at once,
victims losing the least GPU-time. A mixin of ``Engine``: it reads the engine's state."""

from __future__ import annotations

import heapq
import math

from apps.jobs.scheduler.modes import GUARANTEE, Candidate
from apps.jobs.scheduler.state import (
    Pending,
    PendingReason,
    Preemption,
    RunningJob,
)


class PreemptionMixin:
    def _lost(self, run: RunningJob) -> float:
        """GPU-seconds a preemption throws away (none for a job that resumes)."""
        if run.checkpointable:
            return 0.0
        return len(run.gpu_ids) * max(0.0, self.now - run.started_at)

    def _preempt(self) -> None:
        skip = self._no_preemption
        if skip is not None and skip[0] == self.version and self.now < skip[1]:
            return
        version_before = self.version
        if self.gained == self._gain_mark:
            # No GPU came back: a team that changed nothing keeps its failed candidate.
            teams = [
                t
                for t in self.buckets
                if t in self._dirty or self._team_retry.get(t, math.inf) <= self.now
            ]
        else:
            teams = list(self.buckets)  # the heap below orders them
        heap = [
            (key, team)
            for team in teams
            if self._caps(team, GUARANTEE) is not None and (key := self._head_key(team))
        ]
        self.eligible = None
        self._next_eligible = math.inf
        preempted, retry = False, math.inf
        heapq.heapify(heap)
        while heap:
            key, team = heapq.heappop(heap)
            cand = self._candidate(team, GUARANTEE, fitting=False)
            if cand is None:
                self._team_retry.pop(team, None)
                continue
            if cand.key != key:
                heapq.heappush(heap, (cand.key, team))
                continue
            # A job that could not start by preempting on a model still cannot there until
            # GPUs come back or another victim passes the minimum runtime (losses only grow
            # meanwhile). On another model it may: its team's own placements (quota left) or
            # other teams' (free GPUs, which order the models of an any-model job) can turn
            # it to a model never tried.
            failed = self._preempt_failed.get(cand.job.job_id)
            if (
                failed is not None
                and failed[0] == self.gained
                and self.now < failed[1]
                and failed[2] == cand.model
            ):
                retry = min(retry, failed[1])
                self._team_retry[team] = self._retry_at(cand, failed[1])
                continue
            if self.eligible is None:
                self._collect_victims()
            if not self.eligible or not self._preempt_for(cand):
                self._preempt_failed[cand.job.job_id] = (
                    self.gained,
                    self._next_eligible,
                    cand.model,
                )
                retry = min(retry, self._next_eligible)
                self._team_retry[team] = self._retry_at(cand, self._next_eligible)
                continue  # the team's oldest job cannot start by preempting; try no further
            preempted = True
            cand = self._candidate(team, GUARANTEE, fitting=False)
            if cand is not None:
                heapq.heappush(heap, (cand.key, team))
        if not preempted and self.version == version_before:
            self._no_preemption = (self.version, retry)

    def _retry_at(self, cand: Candidate, eligible_at: float) -> float:
        """When the team of a candidate that failed to preempt must be looked at again even if
        it changes nothing: when the next victim becomes eligible, or at the next cycle for a
        job of any model on a fleet of several (other teams' placements reorder its models by
        free GPUs, so its next candidate may be on a model not tried yet)."""
        if cand.job.gpu_model is None and len(self.pool.models) > 1:
            return self.now
        return eligible_at

    def _collect_victims(self) -> None:
        cfg = self.config
        now, running = self.now, self.running
        most, min_runtime = cfg.max_preemptions_per_job, cfg.preempt_min_runtime_seconds
        keyed, loss, next_eligible = [], {}, math.inf
        for j in self.preemptible:
            r = running[j]
            if r.preemptions >= most:
                continue
            started = r.started_at
            ready = started + min_runtime
            if started < now and ready <= now:
                lost = loss[j] = self._lost(r)
                keyed.append((lost, len(r.gpu_ids), -started, j, r))
            else:
                next_eligible = min(next_eligible, max(ready, started + 1e-6))
        # Least GPU-time lost first, then fewest GPUs, youngest, lowest id (unique).
        keyed.sort()
        self._loss = loss
        self.eligible = [k[4] for k in keyed]
        self._next_eligible = next_eligible

    def _preempt_for(self, cand: Candidate) -> bool:
        """Stop the victims that let ``cand`` start now and place it; False (nothing changed)
        when no set of victims within the loss budget frees enough GPUs."""
        job, model = cand.job, cand.model
        # GPU-seconds the victims may lose together, relative to the work the job brings.
        budget = self.config.preempt_max_lost_ratio * job.gpu_count * job.max_runtime
        chosen: list[RunningJob] | None = None
        if job.same_node or job.gpu_count <= self.pool.largest[model]:
            chosen = self._victims_on_one_node(cand, budget)
        if chosen is None and not job.same_node:
            chosen = self._victims_across_nodes(cand, budget)
        if not chosen:
            return False
        return self._preempt_and_place(cand, chosen)

    def _victims_on_one_node(self, cand: Candidate, budget: float) -> list[RunningJob] | None:
        """The cheapest node's victims: per node its free GPUs plus the cheapest victims
        there until the job fits; the node whose victims lose least (then fewest) wins."""
        need = self._victims_per_node(cand, budget)
        count = cand.job.gpu_count
        best = None
        for node in sorted(need):
            have, cost, picked = need[node]
            if have >= count and cost <= budget and (best is None or (cost, len(picked)) < best[0]):
                best = ((cost, len(picked)), picked)
        return best[1] if best else None

    def _victims_per_node(self, cand: Candidate, budget: float) -> dict[str, list]:
        """node -> [GPUs it would have free, GPU-seconds lost, victims], taking the eligible
        victims cheapest first; a node stops taking once the job fits or it is over budget."""
        job, model = cand.job, cand.model
        count = job.gpu_count
        lost = self._loss
        need: dict[str, list] = {}
        for r in self.eligible:
            if lost[r.job_id] > budget:
                break  # sorted by loss: every later victim alone is over the budget
            if r.model != model or r.team == job.team:
                continue
            for node, n in self.spread[r.job_id].items():
                state = need.get(node)
                if state is None:
                    have = len(self.pool.free[model].get(node, ()))
                    state = need[node] = [have, 0.0, []]
                if state[0] >= count or state[1] > budget:
                    continue
                state[0] += n
                state[1] += lost[r.job_id]
                state[2].append(r)
        return need

    def _victims_across_nodes(self, cand: Candidate, budget: float) -> list[RunningJob] | None:
        """For a multi-node gang: the cheapest victims anywhere until the model's free GPUs
        suffice; None when that runs over the budget first."""
        job, model = cand.job, cand.model
        count = job.gpu_count
        lost = self._loss
        free, cost, chosen = self.pool.total.get(model, 0), 0.0, []
        for r in self.eligible:
            if free >= count or cost > budget:
                break
            if r.model != model or r.team == job.team:
                continue
            chosen.append(r)
            free += len(r.gpu_ids)
            cost += lost[r.job_id]
        if free < count or cost > budget:
            return None
        return chosen

    def _preempt_and_place(self, cand: Candidate, chosen: list[RunningJob]) -> bool:
        """Free the victims' GPUs and place the job there. The counts above ignore bookings, so
        the pool may still refuse: then the victims go back untouched and the answer is False."""
        job, model = cand.job, cand.model
        for r in chosen:
            self.remove_running(r.job_id)
        picks = self.pool.find(model, job.gpu_count, job.same_node, self.now + job.max_runtime)
        if picks is None:
            for r in chosen:
                self.add_running(r)
            return False
        gone = {r.job_id for r in chosen}
        self.eligible = [r for r in self.eligible if r.job_id not in gone]
        for r in chosen:
            self.decision.preemptions.append(Preemption(r.job_id, job.job_id, self._loss[r.job_id]))
        self._place(Candidate(cand.key, job, model, picks), False, after_preemption=True)
        n = len(chosen)
        self.decision.pending.append(
            Pending(
                job.job_id,
                PendingReason.WAITING_FOR_PREEMPTION,
                f"Stopping {n} over-quota job{'s' if n != 1 else ''} of other teams to free "
                "its guaranteed GPUs.",
                self.now + self.config.grace_seconds,
            )
        )
        return True

    # -- reservations ------------------------------------------------------------------------
