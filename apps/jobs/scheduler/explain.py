"""Why a job waits, in a sentence, and when it should start: a mixin of ``Engine`` that reads
its state after a cycle."""

from __future__ import annotations

import bisect
import math

from apps.jobs.scheduler.modes import BASELINE, GUARANTEE
from apps.jobs.scheduler.state import (
    Pending,
    PendingReason,
    PriorityClass,
    QueuedJob,
    ResumingNode,
)
from apps.teams.quota_rule import Ceiling, UnitQuotaRow


def pretty_model(model: str | None) -> str:
    return model if model else "GPUs of any model"


def gpu_count(count: int, model: str | None) -> str:
    """ "1 H100 GPU", "12 H100 GPUs", "3 GPUs of any model": the noun in the right number (the
    scheduler has no Django, so not portal.formatting)."""
    noun = "GPU" if count == 1 else "GPUs"
    return f"{count} {model} {noun}" if model else f"{count} {noun} of any model"


def gpus_phrase(count: int, model: str | None) -> str:
    noun = "GPU" if count == 1 else "GPUs"
    return f"{count} free {model} {noun}" if model else f"{count} free {noun}"


class ExplainMixin:
    def _explain(self) -> None:
        """A reason, message and estimated start for every queued job not placed and not
        waiting for a preemption.

        The answer depends on the job's shape, not on the job (see ``_answer``): a cycle with
        100,000 queued jobs has a few thousand shapes. So the jobs are explained a bucket at
        a time (the buckets hold them by shape already), not one by one; what is left per job
        is writing its ``Pending``."""
        waiting = {p.job_id for p in self.decision.pending}
        # Jobs a pass explained (reservations, reclaims), that wait for a preemption or that
        # were stopped before (``_may_borrow`` reads each one's runtime): one by one.
        # Nothing changes while explaining: order the models once.
        special = waiting.union(self.explained, self.restarted)
        self._frozen_models = self._models_for(None)
        answers: dict[tuple, tuple[PendingReason, str, float | None]] = {}
        caches: tuple[dict, dict, dict] = ({}, {}, {})
        pending = self.decision.pending
        fairshare = self.policy == "fairshare"
        queued = self.queued
        one_by_one: list[QueuedJob] = list(self.reservation_jobs.values())
        for team, shapes in self.buckets.items():
            if team in self.quotas.later:
                # the bookings-window check reads each job's runtime
                one_by_one.extend(
                    queued[job_id] for entries in shapes.values() for _, job_id in entries
                )
                continue
            hold = self._hold(team) if fairshare else None
            for entries in shapes.values():
                # Jobs of one shape before and after their team's top job differ (``_hold``):
                # the bucket is in queue order, those from ``split`` on wait behind it.
                split = self._held_split(hold, entries) if hold is not None else len(entries)
                whole = split in (0, len(entries))
                for part in (entries,) if whole else (entries[:split], entries[split:]):
                    if special:
                        for _, job_id in part:
                            if job_id in special:
                                one_by_one.append(queued[job_id])
                        part = [entry for entry in part if entry[1] not in special]
                        if not part:
                            continue
                    # answered for a job of the part left, not for a special one it may start with
                    reason, message, start = self._answer(queued[part[0][1]], answers, caches)
                    pending.extend([Pending(job_id, reason, message, start) for _, job_id in part])
        for job in one_by_one:
            if job.job_id in waiting:
                continue
            done = self.explained.get(job.job_id)
            if done is None:
                pending.append(Pending(job.job_id, *self._answer(job, answers, caches)))
            elif done.estimated_start is not None:  # a reclaim knows when it lands
                pending.append(done)
            else:
                start = self._start_estimate(job, done.reason, caches)
                pending.append(Pending(job.job_id, done.reason, done.message, start))
        self._frozen_models = None

    def _held_split(self, hold: tuple, entries: list) -> int:
        """Where the bucket's jobs that wait behind their team's top job (``_held_back``)
        begin: the jobs after the top job in queue order, when the bucket's shape is one the
        top job holds room against; else none (the length)."""
        top, spare = hold
        job = self.queued[entries[0][1]]
        if job.gpu_count <= spare or self._models_for(job.gpu_model) != [top.model]:
            return len(entries)
        # queue keys are unique (they end with the job id): the top job's key splits the bucket
        return bisect.bisect_right(entries, (top.key, math.inf))

    def _answer(
        self, job: QueuedJob, answers: dict, caches: tuple[dict, dict, dict]
    ) -> tuple[PendingReason, str, float | None]:
        """Why ``job`` waits and when it should start, shared by the jobs that answer alike:
        same team, shape and class, same runtime where the team's bookings ahead read it, and
        the same side of the team's top job."""
        why = (
            job.team,
            job.gpu_model,
            job.gpu_count,
            job.same_node,
            job.priority_class,
            job.max_runtime if job.team in self.quotas.later else None,
            self._held_back(job) is not None if self.policy == "fairshare" else None,
            # stopped before, a job may restart only within its guarantee
            job.job_id in self.restarted and not self._may_borrow(job),
        )
        found = answers.get(why)
        if found is None:
            reason, message = self._why(job, caches[0])
            found = answers[why] = (reason, message, self._start_estimate(job, reason, caches))
        return found

    def _start_estimate(
        self, job: QueuedJob, reason: PendingReason, caches: tuple[dict, dict, dict]
    ) -> float | None:
        """The job's estimated start (``_estimate``), shared by the jobs of its model and GPU
        count; none when it waits for the quota (free GPUs say nothing about when the quota
        changes)."""
        _, has_quota, estimates = caches
        covered = (job.team, job.gpu_model)  # a quota row covers a model it may run on
        if covered not in has_quota:
            has_quota[covered] = any(
                self.quotas.rule.rows_for(job.team, m) for m in self._estimate_models(job)
            )
        if reason == PendingReason.BEYOND_QUOTA or not has_quota[covered]:
            return None
        shape = (job.gpu_model, job.gpu_count)
        if shape not in estimates:
            estimates[shape] = self._estimate(job)
        return estimates[shape]

    def _why(self, job: QueuedJob, fits_cache: dict) -> tuple[PendingReason, str]:
        models = self._models_for(job.gpu_model)
        guaranteed_only = (
            self.policy == "fairshare" and job.priority_class == PriorityClass.GUARANTEED
        )
        mode = GUARANTEE if guaranteed_only else BASELINE
        rule = self.quotas.rule
        with_rows = [m for m in models if rule.rows_for(job.team, m)]
        ceilings = {m: rule.binding_ceiling(job.team, m, guarantee=guaranteed_only) for m in models}
        if with_rows and all(job.gpu_count > c.gpus for c in ceilings.values()):
            model = job.gpu_model or with_rows[0]
            return self._beyond_quota_reason(job, ceilings[model], guaranteed_only)
        if models and all(
            job.gpu_count > self._cap(job.team, m, mode, job.priority_class) for m in models
        ):
            return self._quota_reason(job, job.gpu_model or models[0], guaranteed_only)
        if (
            models
            and job.team in self.quotas.later
            and not any(self._fits_quota_window(job, m, mode) for m in models)
        ):
            return (
                PendingReason.QUOTA_REACHED,
                f"Team {job.team}'s bookings leave no room in its quota before this job would end.",
            )
        if not models:
            return self._powering_up(job) or (
                PendingReason.NO_CAPACITY,
                f"No schedulable {pretty_model(job.gpu_model)} GPUs in the fleet.",
            )
        model = job.gpu_model
        if (
            self.policy == "fairshare"
            and not self._may_borrow(job)
            and all(self._borrows(job.team, m, job.gpu_count) for m in models)
        ):
            hours = self.config.reborrow_max_runtime_seconds / 3600
            held = self._quota_reason(job, model or models[0], True)[1]
            return (
                PendingReason.RESTARTS_WITHIN_GUARANTEE,
                f"A reclaim stopped this job before; with a runtime limit over {hours:g} h it "
                "restarts only within its team's guarantee, not on borrowed GPUs, so that it "
                f"is not stopped again. {held}",
            )
        top = self._held_back(job) if self.policy == "fairshare" else None
        if top is not None:
            return (
                PendingReason.TEAM_JOB_FIRST,
                f"Team {job.team}'s job {top.job.job_id} comes first: it waits for "
                f"{gpu_count(top.job.gpu_count, top.model)} of the team's guarantee, and this "
                "job would leave it too few.",
            )
        if self.policy == "fairshare" and any(
            self.initial_totals.get(m, 0) >= job.gpu_count
            and self.pool.total.get(m, 0) < job.gpu_count
            for m in models
        ):
            ahead = self.placed_count - self.placed_by_team[job.team]
            if ahead:
                jobs = "job" if ahead == 1 else "jobs"
                verb = "comes" if ahead == 1 else "come"
                return (
                    PendingReason.FAIR_SHARE,
                    f"Waiting behind fair share: {ahead} {jobs} of other teams {verb} first.",
                )
        for m in models:
            shape = (m, job.gpu_count, job.same_node)
            if shape not in fits_cache:
                fits_cache[shape] = self.pool.fits_ignoring_bookings(*shape)
        if any(fits_cache[(m, job.gpu_count, job.same_node)] for m in models):
            return (
                PendingReason.RESERVED,
                f"Free {pretty_model(model)} GPUs are booked by other teams before this job "
                "would end.",
            )
        powering_up = self._powering_up(job)
        if powering_up is not None:
            return powering_up
        if job.same_node and job.gpu_count > 1:
            return (
                PendingReason.NO_CAPACITY,
                f"No node has {gpus_phrase(job.gpu_count, model)}.",
            )
        free = sum(self.pool.total.get(m, 0) for m in models)
        return (
            PendingReason.NO_CAPACITY,
            f"Only {gpu_count(free, model)} {'is' if free == 1 else 'are'} free; "
            f"the job needs {job.gpu_count}.",
        )

    def _quota_reason(
        self, job: QueuedJob, model: str, guaranteed_only: bool
    ) -> tuple[PendingReason, str]:
        row = self.quotas.binding(job.team, model, guarantee=guaranteed_only)
        if row is None:
            return (
                PendingReason.QUOTA_REACHED,
                f"Team {job.team} has no quota for {pretty_model(model)}; a platform admin "
                "gives quotas.",
            )
        scope = row.model  # None: the row covers every model
        held = self.quotas.used[(job.team, scope)]
        if guaranteed_only:
            if held >= row.guaranteed:
                message = (
                    f"Team {job.team} is using all {gpu_count(row.guaranteed, scope)} it is "
                    "guaranteed."
                )
            else:
                message = (
                    f"Team {job.team} holds {held} of the {gpu_count(row.guaranteed, scope)} "
                    f"it is guaranteed; the job needs {job.gpu_count}."
                )
            return PendingReason.QUOTA_REACHED, message
        if held + job.gpu_count <= row.limit and (unit := self._unit_reason(job, model)):
            return PendingReason.QUOTA_REACHED, unit
        if held >= row.limit:
            message = f"Team {job.team} is at its quota of {gpu_count(row.limit, scope)}."
        else:
            message = (
                f"Team {job.team} holds {held} of its quota of {gpu_count(row.limit, scope)}; "
                f"the job needs {job.gpu_count}."
            )
        return PendingReason.QUOTA_REACHED, message

    def _unit_reason(self, job: QueuedJob, model: str) -> str | None:
        """When the team's own rows leave room, the unit whose limit the job's borrowed GPUs
        would pass (the tightest), in a sentence; None without one."""
        used = self.quotas.unit_used
        rows = self.quotas.rule.unit_rows_for(job.team, model)
        if not rows:
            return None
        row = min(rows, key=lambda r: r.limit - used.get((r.unit, r.model), 0))
        held = used.get((row.unit, row.model), 0)
        return (
            f"The teams of unit {self.quotas.rule.tree.name(row.unit)} hold {held} of its quota of "
            f"{gpu_count(row.limit, row.model)} together; the job needs {job.gpu_count} "
            f"beyond team {job.team}'s guarantee."
        )

    def _beyond_quota_reason(
        self, job: QueuedJob, ceiling: Ceiling, guaranteed_only: bool
    ) -> tuple[PendingReason, str]:
        """A job larger than the team may ever hold waits for the quota, not for GPUs; the
        message names the row that sets that ceiling (the quota rule's ``binding_ceiling``):
        the team's guarantee, one of its limits, or a unit's limit above it."""
        row = ceiling.row
        if guaranteed_only:
            return (
                PendingReason.BEYOND_QUOTA,
                f"The job needs {job.gpu_count} GPUs but team {job.team} is guaranteed "
                f"{gpu_count(row.guaranteed, row.model)}: as Guaranteed it cannot start until "
                "the guarantee changes. Submit it as Over quota to run on spare GPUs.",
            )
        if isinstance(row, UnitQuotaRow):
            return (
                PendingReason.BEYOND_QUOTA,
                f"The job needs {job.gpu_count} GPUs, more than unit "
                f"{self.quotas.rule.tree.name(row.unit)}'s limit of "
                f"{gpu_count(row.limit, row.model)} for all its teams together: it cannot "
                "start until the unit's limit is raised.",
            )
        return (
            PendingReason.BEYOND_QUOTA,
            f"The job needs {job.gpu_count} GPUs, more than team {job.team}'s limit of "
            f"{gpu_count(row.limit, row.model)}: it cannot start until a platform admin raises "
            "the limit.",
        )

    def _resuming_for(self, job: QueuedJob) -> list[ResumingNode]:
        """Nodes powering up whose GPUs the job could use, the soonest ready first."""
        return sorted(
            (r for r in self.resuming if job.gpu_model in (None, r.model)),
            key=lambda r: (r.ready_at, r.node),
        )

    def _estimate_models(self, job: QueuedJob) -> list[str]:
        """The models the job could run on now or once the nodes powering up are on."""
        models = self._models_for(job.gpu_model)
        return models + sorted({r.model for r in self._resuming_for(job)} - set(models))

    def _powering_up(self, job: QueuedJob) -> tuple[PendingReason, str] | None:
        """The job does not fit the free GPUs, but does once the nodes powering up (the soonest
        ready first) are on: which nodes, and about how long."""
        resuming = self._resuming_for(job)
        needed: list[ResumingNode] | None = None
        if job.same_node and job.gpu_count > 1:
            big_enough = [r for r in resuming if r.gpus >= job.gpu_count]
            needed = big_enough[:1] or None
        else:
            for model in sorted({r.model for r in resuming}):
                have, used = self.pool.total.get(model, 0), []
                for node in (r for r in resuming if r.model == model):
                    if have >= job.gpu_count:
                        break
                    used.append(node)
                    have += node.gpus
                sooner = needed is None or (used and used[-1].ready_at < needed[-1].ready_at)
                if have >= job.gpu_count and used and sooner:
                    needed = used
        if not needed:
            return None
        minutes = max(1, math.ceil((needed[-1].ready_at - self.now) / 60))
        names = ", ".join(r.node for r in needed)
        subject = f"Node {names} is" if len(needed) == 1 else f"Nodes {names} are"
        return PendingReason.POWERING_UP, f"{subject} powering up (about {minutes} min)."

    def _estimate(self, job: QueuedJob) -> float | None:
        """When enough GPUs of the model will be free if running jobs use all their time, and
        nodes powering up are on after their resume time."""
        best: float | None = None
        resuming = self._resuming_for(job)
        for model in self._estimate_models(job):
            waking = [r for r in resuming if r.model == model]
            if self.pool.capacity.get(model, 0) + sum(r.gpus for r in waking) < job.gpu_count:
                continue
            free = self.pool.total.get(model, 0)
            if free >= job.gpu_count:
                return self.now
            times = sorted(
                [
                    *self.releases.get(model, []),
                    *self.booking_releases.get(model, []),
                    *(r.ready_at for r in waking for _ in range(r.gpus)),
                ]
            )
            idx = job.gpu_count - free - 1
            if idx < len(times):
                t = max(self.now, times[idx])
                best = t if best is None else min(best, t)
        return best
