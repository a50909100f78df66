"""What the engine is told between cycles: jobs queued and dequeued, jobs started and stopped,
bookings; it keeps its indexes (buckets, holdings, release times) current. A mixin of ``Engine``."""

from __future__ import annotations

import bisect
import math

from apps.jobs.scheduler.state import (
    Booking,
    PriorityClass,
    QueuedJob,
    RunningJob,
)


class QueueMixin:
    def enqueue(self, job: QueuedJob) -> None:
        self.version += 1
        self._dirty.add(job.team)
        self._drain_cands.pop(job.team, None)
        self.queued[job.job_id] = job
        if job.preemptions:
            self.restarted.add(job.job_id)
        if job.reservation_id is not None:
            self.reservation_jobs[job.job_id] = job
            return
        shape = (job.priority_class, job.gpu_model, job.gpu_count, job.same_node)
        entries = self.buckets.setdefault(job.team, {}).setdefault(shape, [])
        key = self.queue_order(job)
        bisect.insort(entries, (key, job.job_id))
        head = self._heads.get(job.team)
        if head is not None and key < head:
            self._heads[job.team] = key

    def enqueue_many(self, jobs) -> None:
        """``enqueue`` for a whole queue at once (a live cycle starts from the full queue):
        each bucket is sorted once instead of one insertion per job."""
        new: dict[tuple, list] = {}
        teams = set()
        for job in jobs:
            self.queued[job.job_id] = job
            if job.preemptions:
                self.restarted.add(job.job_id)
            if job.reservation_id is not None:
                self.reservation_jobs[job.job_id] = job
                continue
            teams.add(job.team)
            shape = (job.priority_class, job.gpu_model, job.gpu_count, job.same_node)
            new.setdefault((job.team, shape), []).append((self.queue_order(job), job.job_id))
        self.version += 1
        for team in teams:
            self._dirty.add(team)
            self._drain_cands.pop(team, None)
            self._heads.pop(team, None)  # recomputed from the buckets when next asked
        for (team, shape), entries in new.items():
            bucket = self.buckets.setdefault(team, {}).setdefault(shape, [])
            bucket.extend(entries)
            bucket.sort()

    def dequeue(self, job_id: int) -> QueuedJob:
        self.version += 1
        self._preempt_failed.pop(job_id, None)
        self._reclaim_clocks.pop(job_id, None)
        job = self.queued.pop(job_id)
        self.restarted.discard(job_id)
        self._drain_cands.pop(job.team, None)
        if job.reservation_id is not None:
            del self.reservation_jobs[job_id]
            return job
        shape = (job.priority_class, job.gpu_model, job.gpu_count, job.same_node)
        team = self.buckets[job.team]
        entries = team[shape]
        entry = (self.queue_order(job), job_id)
        k = bisect.bisect_left(entries, entry)
        del entries[k]
        if self._heads.get(job.team) == entry[0]:
            del self._heads[job.team]
        if not entries:
            del team[shape]
            if not team:
                del self.buckets[job.team]
        return job

    def add_running(self, run: RunningJob) -> None:
        self.version += 1
        self._dirty.add(run.team)
        self._drain_cands.pop(run.team, None)
        ids = [g for g in run.gpu_ids if g in self.pool.info]
        self.running[run.job_id] = run
        self.pool.take(ids)
        self.busy.update(run.gpu_ids)
        self.team_gpus[run.team] += len(run.gpu_ids)
        if run.reservation_id is None:
            before = self.quotas.room(run.team, run.model, guarantee=True)
            self.quotas.start(run)
            if before >= 0 > before - len(run.gpu_ids):
                # The team goes above its guarantee: its older over-quota jobs may now yield,
                # so a preemption that failed before may work (as when GPUs come back).
                self.gained += 1
            self._caps_cache.pop(run.team, None)
            self._unit_changed(run.team)
            if self._is_preemptible(run):
                self.preemptible.add(run.job_id)
                self._lend(run, len(ids))
        info = self.pool.info
        if len(ids) == 1:
            self.spread[run.job_id] = {info[ids[0]].node: 1}
        else:
            spread: dict[str, int] = {}
            for gid in ids:
                node = info[gid].node
                spread[node] = spread.get(node, 0) + 1
            self.spread[run.job_id] = spread
        on_node = self.lent_on_node if run.job_id in self.preemptible else self.kept_on_node
        for node, n in self.spread[run.job_id].items():
            self.on_node[node].add(run.job_id)
            on_node[node] += n
        if self.config.explain:  # release times serve start estimates only
            end = run.started_at + run.max_runtime
            releases = self.releases[run.model]
            for _ in run.gpu_ids:
                bisect.insort(releases, end)

    def _lend(self, run: RunningJob, n: int) -> None:
        """Count GPUs of preemptible jobs per model and per (team, model) (``_hold``)."""
        self.lent[run.model] += n
        self.lent[(run.team, run.model)] += n

    def _unit_changed(self, team: str) -> None:
        """What ``team`` holds counts in its units' limits: the teams below them may now
        take more or less (nothing to do without unit rows)."""
        if not self.quotas.rule.has_unit_rows:
            return
        for peer in self.quotas.shares(team)[1]:
            self._caps_cache.pop(peer, None)
            self._drain_cands.pop(peer, None)
            self._dirty.add(peer)

    def remove_running(self, job_id: int) -> RunningJob:
        self.version += 1
        run = self.running.pop(job_id)
        self._drain_cands.pop(run.team, None)
        ids = [g for g in run.gpu_ids if g in self.pool.info]
        self.pool.give(ids)
        self.gained += 1
        self.busy.difference_update(run.gpu_ids)
        self.team_gpus[run.team] -= len(run.gpu_ids)
        on_node = self.lent_on_node if job_id in self.preemptible else self.kept_on_node
        if run.reservation_id is None:
            self.quotas.stop(run)
            self._caps_cache.pop(run.team, None)
            self._unit_changed(run.team)
            if job_id in self.preemptible:
                self.preemptible.discard(job_id)
                self._lend(run, -len(ids))
        for node, n in self.spread.pop(job_id).items():
            self.on_node[node].discard(job_id)
            on_node[node] -= n
        if self.config.explain:
            end = run.started_at + run.max_runtime
            releases = self.releases[run.model]
            k = bisect.bisect_left(releases, end)
            stop = min(bisect.bisect_right(releases, end), k + len(run.gpu_ids))
            del releases[k:stop]
        return run

    def withdraw(self, gpu_ids) -> None:
        """Free GPUs leave the pool (their node powered down); capacity only shrinks."""
        self.version += 1
        self.pool.take(gpu_ids)

    def restore(self, gpu_ids) -> None:
        """GPUs taken out by ``withdraw`` come back (their node resumed)."""
        self.version += 1
        self.pool.give(gpu_ids)
        self.gained += 1

    def add_bookings(self, bookings: list[Booking], now: float) -> None:
        """Active bookings hold their GPUs for their reservation; later ones allow backfill.
        Both count in their team's quota (see ``QuotaBook.book``)."""
        future: dict[int, float] = {}
        for b in bookings:
            if b.end <= now:
                continue
            info = self.pool.info.get(b.gpu_id)
            model = b.model or (info.model if info else None)
            if model is not None:
                self.quotas.book(b, model, now)
                self._caps_cache.pop(b.team, None)
                self._drain_cands.pop(b.team, None)
                self._unit_changed(b.team)
            if b.start <= now:
                self.active_bookings.setdefault(b.reservation_id, []).append(b.gpu_id)
                if b.gpu_id in self.pool.info and b.gpu_id not in self.busy:
                    self.pool.take((b.gpu_id,))
            else:
                future[b.gpu_id] = min(b.start, future.get(b.gpu_id, math.inf))
        for gid, start in sorted(future.items()):
            if gid in self.pool.info:
                self.pool.set_aside_booked(gid, start)
        first_end: dict[int, float] = {}
        for b in bookings:
            if b.end > now and b.gpu_id in self.pool.info and b.gpu_id not in self.busy:
                first_end[b.gpu_id] = min(b.end, first_end.get(b.gpu_id, math.inf))
        for gid, end in first_end.items():
            bisect.insort(self.booking_releases[self.pool.info[gid].model], end)

    def _is_preemptible(self, run: RunningJob) -> bool:
        return run.priority_class != PriorityClass.GUARANTEED and (
            run.over_quota or run.priority_class == PriorityClass.PREEMPTIBLE
        )
