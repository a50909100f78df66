"""Guarantee reclaim (see core's docstring, step 4): a job within its team's unused guarantee
gets the over-quota GPUs of other teams back once those jobs have run their minimum runtime.
The bounds (the loss budget, the cap on preemptions per job) choose *which* victims: victims
within them are taken first, and only when no such set frees the GPUs are the others taken,
cheapest first (jobs at the cap, unless they resume from a checkpoint, only when nothing else
frees the GPUs), so a bound never vetoes a reclaim; multi-node gangs that would lose work
wait out a longer patience unless nothing else frees the GPUs. Only when the waiting job then
starts at once, victims losing the least GPU-time. A mixin of ``Engine``: it reads the
engine's state."""

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

    def _excess(self, team: str, model: str) -> int:
        """GPUs of ``model`` the team holds beyond its guarantee (under the quota rule)."""
        return -self.quotas.room(team, model, guarantee=True)

    def _preempt(self) -> None:
        skip = self._no_preemption
        if skip is not None and skip[0] == self.version and self.now < skip[1]:
            return
        version_before = self.version
        # A team left out below still wants a retry when its own time comes.
        later = math.inf
        if self.gained == self._gain_mark:
            # No GPU came back: a team that changed nothing keeps its failed candidate.
            teams = []
            for t in self.buckets:
                at = self._team_retry.get(t, math.inf)
                if t in self._dirty or at <= self.now:
                    teams.append(t)
                else:
                    later = min(later, at)
        else:
            teams = list(self.buckets)  # the heap below orders them
        heap = [
            (key, team)
            for team in teams
            if self._caps(team, GUARANTEE) is not None and (key := self._head_key(team))
        ]
        self.eligible = None
        self._next_eligible = math.inf
        self._patience_until = math.inf
        preempted, retry = False, later
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
            self._reclaim_since(cand.job)  # its reclaim clock runs from now on, if not yet
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
            self._patience_until = math.inf
            if not (self.eligible or self.protected) or not self._preempt_for(cand):
                if self.config.explain:
                    self._explain_reclaim(cand)
                until = min(self._next_eligible, self._patience_until)
                self._preempt_failed[cand.job.job_id] = (self.gained, until, cand.model)
                retry = min(retry, until)
                self._team_retry[team] = self._retry_at(cand, until)
                continue  # the team's oldest job cannot start by preempting; try no further
            preempted = True
            cand = self._candidate(team, GUARANTEE, fitting=False)
            if cand is not None:
                heapq.heappush(heap, (cand.key, team))
        if not preempted and self.version == version_before:
            self._no_preemption = (self.version, retry)

    def _explain_reclaim(self, cand: Candidate) -> None:
        """Tell a job within its guarantee which jobs stop for it and when, in the order the
        reclaim takes them: the over-quota jobs of other teams (on the node that will have
        room soonest, for a job that needs one node) once they may be preempted, those
        outside the loss budget after the job's patience, multi-node gangs that would lose
        work after the longer patience for gangs, beside the jobs that end by their runtime
        limit; jobs preempted the most times already (that would lose work) only if all that
        is not enough."""
        job, model, now = cand.job, cand.model, self.now
        cfg = self.config
        min_runtime = cfg.preempt_min_runtime_seconds
        since = self._reclaim_since(job)
        patience_at = since + cfg.reclaim_patience_seconds
        gangs_at = since + cfg.gang_reclaim_patience_seconds
        budget = cfg.preempt_max_lost_ratio * job.gpu_count * job.max_runtime
        if job.same_node:
            node = self._drain_node(job, model, set())
            if node is None:
                return
            have = len(self.pool.free[model].get(node, ()))
            jobs = [(j, self.spread[j][node]) for j in self.on_node.get(node, ())]
        else:
            have = self.pool.total.get(model, 0)
            jobs = [(j, len(self.running[j].gpu_ids)) for j in self.running]
        releases, last = [], []
        for jid, n in jobs:
            r = self.running[jid]
            if r.model != model:
                continue
            stops = jid in self.preemptible and r.team != job.team
            if stops and self._excess(r.team, model) > 0:
                at = max(now, r.started_at + min_runtime)
                capped = r.preemptions >= cfg.max_preemptions_per_job and not r.checkpointable
                if not r.checkpointable and n * (at - r.started_at) > budget:
                    # outside the bounds: after the job's patience, a gang after the longer one
                    at = max(at, gangs_at if self._costly_gang(r) else patience_at)
                elif capped:
                    at = max(at, patience_at)
                entry = (min(at, r.started_at + r.max_runtime), True, r.team, n)
                (last if capped else releases).append(entry)
            else:
                releases.append((r.started_at + r.max_runtime, False, r.team, n))
        victims: dict[str, int] = {}
        natural, when = 0, now
        for at, stops, team, n in [*sorted(releases), *sorted(last)]:
            if have >= job.gpu_count:
                break
            have += n
            when = max(when, at)
            if stops:
                victims[team] = victims.get(team, 0) + 1
            else:
                natural += 1
        if have < job.gpu_count or not victims:
            return
        who = " and ".join(
            f"{n} job{'s' if n != 1 else ''} of team {team}" for team, n in sorted(victims.items())
        )
        minutes = math.ceil((when - now) / 60)
        verb = "stops" if sum(victims.values()) == 1 else "stop"
        message = f"Reclaiming your guarantee: {who} {verb} " + (
            f"in {minutes} min." if minutes > 0 else "now."
        )
        if natural:
            message += f" {natural} more end{'s' if natural == 1 else ''} by its runtime limit."
        self.explained[job.job_id] = Pending(
            job.job_id, PendingReason.RECLAIMING_GUARANTEE, message[:500], when
        )

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
        keyed, protected, loss, next_eligible = [], [], {}, math.inf
        over: dict[tuple[str, str], bool] = {}  # (team, model) -> above its guarantee now
        room = self.quotas.room
        for j in self.preemptible:
            r = running[j]
            started = r.started_at
            ready = started + min_runtime
            if started >= now or ready > now:
                # not yet (a retry then is cheap, even if its team is within its guarantee)
                next_eligible = min(next_eligible, max(ready, started + 1e-6))
                continue
            above = over.get((r.team, r.model))
            if above is None:
                above = over[(r.team, r.model)] = room(r.team, r.model, guarantee=True) < 0
            if not above:
                continue  # the team is within its guarantee now: nothing of it yields
            size = len(r.gpu_ids)
            # as _lost(), inlined: this loop runs over every over-quota job
            lost = loss[j] = 0.0 if r.checkpointable else size * (now - started)
            entry = (lost, size, -started, j, r)
            (protected if r.preemptions >= most else keyed).append(entry)
        # Least GPU-time lost first, then fewest GPUs, youngest, lowest id (unique); jobs
        # preempted the most times already come after all others.
        keyed.sort()
        protected.sort()
        self._loss = loss
        self.eligible = [k[4] for k in keyed]
        self.protected = [k[4] for k in protected]
        self._next_eligible = next_eligible

    def _preempt_for(self, cand: Candidate) -> bool:
        """Stop the victims that let ``cand`` start now and place it; False (nothing changed)
        when no set of eligible victims frees enough GPUs. Victims within the bounds first
        (unprotected, losing at most the budget); past the job's patience any unprotected
        ones (and protected ones that lose nothing), cheapest first; only then the others."""
        job, cfg = cand.job, self.config
        # GPU-seconds the victims may lose together, relative to the work the job brings.
        budget = cfg.preempt_max_lost_ratio * job.gpu_count * job.max_runtime
        chosen = self._victims(cand, budget)
        since = self._reclaim_since(job)
        patience_at = since + cfg.reclaim_patience_seconds
        gangs_at = since + cfg.gang_reclaim_patience_seconds
        if chosen is None and self.now < patience_at:
            self._patience_until = min(self._patience_until, patience_at)
        elif chosen is None and self.now < gangs_at and self._holds_gangs():
            # Multi-node gangs that would lose work wait out the longer patience: the others
            # first, and if they do not free the GPUs the job waits while its node drains.
            saved = self.eligible, self.protected
            self.eligible = [r for r in saved[0] if not self._costly_gang(r)]
            self.protected = [r for r in saved[1] if not self._costly_gang(r)]
            try:
                chosen = self._victims_past_patience(cand)
            finally:
                self.eligible, self.protected = saved
            if chosen is None:
                self._patience_until = min(self._patience_until, gangs_at)
        elif chosen is None:
            chosen = self._victims_past_patience(cand)
        if not chosen:
            return False
        return self._preempt_and_place(cand, chosen)

    def _victims_past_patience(self, cand: Candidate) -> list[RunningJob] | None:
        """Past its patience the loss budget goes first, then the cap on preemptions per
        job: a job preempted the most times already stops again only when no other victims
        free the GPUs, unless it resumes from its checkpoint (it loses nothing)."""
        lossless = [r for r in self.protected if not self._loss[r.job_id]]
        chosen = self._victims_with(cand, lossless)
        if chosen is None and len(lossless) < len(self.protected):
            chosen = self._victims_with(cand, self.protected)
        return chosen

    def _costly_gang(self, run: RunningJob) -> bool:
        """A multi-node gang (more GPUs than any node of its model) that would lose work:
        stopping it throws away many GPUs' worth of run, often hours of it."""
        return not run.checkpointable and len(run.gpu_ids) > self.pool.largest[run.model]

    def _holds_gangs(self) -> bool:
        """Whether any eligible victim is a ``_costly_gang``."""
        costly = self._costly_gang
        return any(costly(r) for r in self.eligible) or any(costly(r) for r in self.protected)

    def _victims_with(self, cand: Candidate, protected: list[RunningJob]):
        """``_victims`` without a loss budget, taking ``protected`` jobs too, all cheapest
        first."""
        if not protected:
            return self._victims(cand, math.inf)
        saved = self.eligible
        self.eligible = sorted(
            [*saved, *protected],
            key=lambda r: (self._loss[r.job_id], len(r.gpu_ids), -r.started_at, r.job_id),
        )
        try:
            return self._victims(cand, math.inf)
        finally:
            self.eligible = saved

    def _reclaim_since(self, job) -> float:
        """When the job's reclaim clock started (``QueuedJob.reclaim_since``); a job without
        one starts it now, and the decision reports it so that later cycles (even of a fresh
        engine) count the patience from the same time."""
        if job.reclaim_since is not None:
            return job.reclaim_since
        since = self._reclaim_clocks.get(job.job_id)
        if since is None:
            since = self._reclaim_clocks[job.job_id] = self.now
            self.decision.reclaim_clocks[job.job_id] = since
        return since

    def _victims(self, cand: Candidate, budget: float) -> list[RunningJob] | None:
        job, model = cand.job, cand.model
        chosen: list[RunningJob] | None = None
        if job.same_node or job.gpu_count <= self.pool.largest[model]:
            chosen = self._victims_on_one_node(cand, budget)
        if chosen is None and not job.same_node:
            chosen = self._victims_across_nodes(cand, budget)
        return chosen

    def _victims_on_one_node(self, cand: Candidate, budget: float) -> list[RunningJob] | None:
        """The cheapest node's victims: per node its free GPUs plus the cheapest victims
        there until the job fits; the node whose victims lose least (then fewest) wins."""
        need = self._victims_per_node(cand, budget)
        count = cand.job.gpu_count
        best = None
        for node in sorted(need):
            have, cost, picked, _ = need[node]
            if have >= count and cost <= budget and (best is None or (cost, len(picked)) < best[0]):
                best = ((cost, len(picked)), picked)
        return best[1] if best else None

    def _victim_order(self, team: str) -> tuple[list[RunningJob], bool]:
        """The eligible victims in the order a reclaim by ``team`` takes them, and whether
        that is the cost order: with units, borrowers outside its unit first (``units``)."""
        if self.units.active:
            return self.units.reclaim_order(self.eligible, team), False
        return self.eligible, True

    def _victims_per_node(self, cand: Candidate, budget: float) -> dict[str, list]:
        """node -> [GPUs it would have free, GPU-seconds lost, victims], taking the eligible
        victims cheapest first; a node stops taking once the job fits or it is over budget."""
        job, model = cand.job, cand.model
        count = job.gpu_count
        lost = self._loss
        need: dict[str, list] = {}
        victims, by_loss = self._victim_order(job.team)
        for r in victims:
            if lost[r.job_id] > budget:
                if by_loss:
                    break  # sorted by loss: every later victim alone is over the budget
                continue
            if r.model != model or r.team == job.team:
                continue
            for node, n in self.spread[r.job_id].items():
                state = need.get(node)
                if state is None:
                    have = len(self.pool.free[model].get(node, ()))
                    state = need[node] = [have, 0.0, [], {}]
                if state[0] >= count or state[1] > budget:
                    continue
                # Only work above its team's guarantee yields: stop taking from a team once
                # the victims taken would bring it down to its guarantee.
                taken = state[3].get(r.team, 0)
                if self._excess(r.team, model) - taken <= 0:
                    continue
                state[3][r.team] = taken + len(r.gpu_ids)
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
        taken: dict[str, int] = {}
        for r in self._victim_order(job.team)[0]:
            if free >= count or cost > budget:
                break
            if r.model != model or r.team == job.team:
                continue
            if self._excess(r.team, model) - taken.get(r.team, 0) <= 0:
                continue
            taken[r.team] = taken.get(r.team, 0) + len(r.gpu_ids)
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
        self.protected = [r for r in self.protected if r.job_id not in gone]
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
