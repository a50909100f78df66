"""Scheduling: ``schedule(state, policy, config) -> Decision`` and the ``Engine`` behind it.

Pure Python, no Django. The live dispatcher calls ``schedule()``, which loads a fresh
``Engine`` from a ``ClusterState`` and runs one cycle. The trace replayer keeps one ``Engine``
for the whole replay and tells it what changed (a job arrived, ended, was preempted), so a
cycle costs about the work it does, not the size of the queue or the fleet. Both run the same
``Engine.cycle()``; a property test replays random traces both ways and compares decisions.

What the engine keeps between cycles: the free-GPU index (``FreePool``), per team the queued
jobs in buckets of one shape (priority class, model, GPU count, same node), each bucket sorted
in queue order; GPUs held per team and quota key; running jobs by node; and per model the
sorted times at which running GPUs are released (for start estimates).

Order of work in a ``fairshare`` cycle:

1. Jobs bound to a reservation run on that booking's GPUs while the booking is active.
2. Guaranteed share: the oldest job of any team that fits within its team's guarantee goes
   next, until nothing more fits.
3. Weighted fair share of the spare capacity: the team with the lowest dominant share goes
   next (recent GPU-hours decayed with a half-life plus GPUs held now, divided by the team's
   weight = its guaranteed GPUs); only within the quota ``limit``. Waiting time lowers a team's
   effective share (aging), so nothing starves. A team whose next job does not fit is passed
   over for its first job that does (free capacity only shrinks within a cycle, so a job that
   does not fit now will not fit later in the cycle).
   ``SchedulerConfig.spare_order`` can order this pool instead by least attained service
   (Tiresias) or by highest response ratio (the team whose next job waited longest for its
   runtime).
4. Guarantee reclaim (preemption): for a team's oldest job that fits within its guarantee and
   does not fit in the free GPUs, over-quota work of other teams that has run
   ``preempt_min_runtime_seconds`` stops, when the freed GPUs (plus free ones) let the job
   start at once (it is placed on them in ``Decision.after_preemption``). The bounds choose
   the victims, they never veto the reclaim: victims preempted fewer than
   ``max_preemptions_per_job`` times and losing together at most ``preempt_max_lost_ratio``
   times the waiting job's work come first; only when no such set frees the GPUs are others
   taken, still the least GPU-time lost first (a checkpointable job loses none). A victim is
   not restarted in the cycle that stopped it. A gang that needs one whole node drains one
   ahead (see ``_drain``): no over-quota work starts there while it waits.

Within a team, ``fairshare`` takes jobs in the order of their turn (``QueuedJob.turn``, from
their user's virtual clock, ``usage.UserClock``: per-user fair share inside a team), which is
the submit time for jobs without a user; aging counts from the turn.

``fifo`` and ``sjf`` are baselines: first-fit in submit order / shortest ``max_runtime`` first,
respecting quota limits, no guarantees, no fair share, no preemption.

Placement is gang (all GPUs or none) and topology-aware (see ``FreePool.find``): one node when
it can, required when ``same_node``; otherwise the fewest nodes, one NVLink domain if possible,
else one rack (the node label ``rack``) if possible.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from apps.jobs.scheduler.explain import ExplainMixin, gpus_phrase
from apps.jobs.scheduler.modes import BASELINE, GUARANTEE, SPARE, Candidate
from apps.jobs.scheduler.pool import FreePool
from apps.jobs.scheduler.preemption import PreemptionMixin
from apps.jobs.scheduler.quotas import QuotaBook
from apps.jobs.scheduler.state import (
    Booking,
    ClusterState,
    Decision,
    GpuInfo,
    Pending,
    PendingReason,
    Placement,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
)
from apps.jobs.scheduler.usage import UsageMeter

POLICIES = ("fairshare", "fifo", "sjf")
SPARE_ORDERS = ("share", "las", "tiresias", "slowdown")  # see SchedulerConfig.spare_order
# Tiresias' queues: GPU-seconds attained up to each bound (1, 10, 100 GPU-hours), then the rest.
TIRESIAS_BOUNDS = (3600.0, 36_000.0, 360_000.0)
# The class of jobs a placement pass leaves to the other pass.
_SKIPPED_CLASS = {GUARANTEE: PriorityClass.PREEMPTIBLE, SPARE: PriorityClass.GUARANTEED}


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs of the scheduler; the defaults suit the live portal."""

    # Recent GPU-seconds lose half their weight in the fair share after this long.
    usage_half_life_seconds: float = 7 * 24 * 3600.0
    # Each hour a job waits lowers its team's effective share by this much (aging).
    aging_per_hour: float = 0.05
    # Order of the spare (over-guarantee) pool in ``fairshare``: "share", the team with the
    # lowest weighted share first (see step 3); "las", least attained service first (the job
    # that has run the fewest GPU-seconds in earlier attempts, then queue order; as in
    # Tiresias); "tiresias", the same in a few queues (``TIRESIAS_BOUNDS``: jobs that have
    # attained about as much share one queue, served in queue order, as Tiresias' discretized
    # LAS); "slowdown", the team whose next job has waited longest relative to its
    # runtime first (highest response ratio (wait + runtime) / runtime, as in HRRN and
    # Themis' finish-time fairness), which evens out the teams' slowdown.
    spare_order: str = "share"
    preemption_enabled: bool = True
    # A job runs at least this long before it may be preempted (Slurm's PreemptExemptTime).
    preempt_min_runtime_seconds: float = 1800.0
    # A job preempted this many times is preempted again only when no other victims can free
    # the GPUs a guarantee needs back.
    max_preemptions_per_job: int = 2
    # Victims throwing away at most this times what the waiting job asked for (GPUs x max
    # runtime) come first: a notebook stops a day-old 64-GPU training run only when nothing
    # cheaper frees its guaranteed GPUs.
    preempt_max_lost_ratio: float = 0.5
    # A job within its guarantee waits this long for GPUs to come back by themselves before
    # victims outside the bounds above are stopped for it (within them: at once).
    reclaim_patience_seconds: float = 600.0
    # Keep borrowed (over-quota) work and guaranteed work on separate nodes where both fit,
    # so that a reclaim frees whole nodes. Off by default: on the synthetic bench trace it
    # spends whole free nodes on borrowed 1-GPU jobs and more multi-node gangs are preempted
    # (GPU-hours lost about 3 x); on the Alibaba pod list it cuts them by a third.
    pack_borrowed: bool = False
    # Time a preempted job gets to stop (SIGTERM -> SIGKILL); used for estimates only.
    grace_seconds: float = 30.0
    # Write a message and an estimated start for every pending job. The replayer turns it
    # off, and then ``Decision.pending`` lists only jobs waiting for a preemption.
    explain: bool = True


def queue_order_key(policy: str):
    """The order in which ``policy`` takes waiting jobs: under ``fairshare`` each job's turn
    in its team's queue (per-user fair share; guarantees and spare capacity are served in
    this order within each team), under ``sjf`` shortest ``max_runtime`` first, else oldest
    first. The queue page lists jobs by this key too."""
    return _order_key(policy)


def _order_key(policy: str):
    if policy == "sjf":
        return lambda j: (j.max_runtime, j.submitted_at, j.job_id)
    if policy == "fairshare":  # per-user fair share inside a team: the job's turn
        return lambda j: (j.queued_since, j.job_id)
    return lambda j: (j.submitted_at, j.job_id)


def running_from(
    job: QueuedJob, gpu_ids: tuple[int, ...], model: str, now: float, over_quota: bool
) -> RunningJob:
    """The running record of ``job`` started at ``now`` on ``gpu_ids``."""
    return RunningJob(
        job.job_id,
        job.team,
        model,
        tuple(gpu_ids),
        now,
        job.max_runtime,
        job.priority_class,
        over_quota,
        job.reservation_id,
        job.checkpointable,
        job.preemptions,
    )


class Engine(PreemptionMixin, ExplainMixin):
    """Scheduler state kept between cycles; see the module docstring."""

    def __init__(
        self,
        gpus: list[GpuInfo],
        quotas: list[TeamQuota],
        policy: str = "fairshare",
        config: SchedulerConfig | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"Unknown policy {policy!r}; choose one of {', '.join(POLICIES)}.")
        self.policy = policy
        self.config = config or SchedulerConfig()
        if self.config.spare_order not in SPARE_ORDERS:
            raise ValueError(
                f"Unknown spare order {self.config.spare_order!r}; choose one of "
                f"{', '.join(SPARE_ORDERS)}."
            )
        self.pool = FreePool(gpus)
        self.quotas = QuotaBook(quotas)
        self.queue_order = queue_order_key(policy)
        self.total_capacity = max(1, len(gpus))
        self.running: dict[int, RunningJob] = {}
        self.busy: set[int] = set()
        self.team_gpus: dict[str, int] = defaultdict(int)
        self.spread: dict[int, dict[str, int]] = {}  # running job -> GPUs per node
        self.on_node: dict[str, set[int]] = defaultdict(set)  # node -> running jobs there
        # node -> GPUs of running over-quota (preemptible) jobs there / of the others: borrowed
        # work is packed apart from guaranteed work so that a reclaim frees whole nodes
        self.lent_on_node: dict[str, int] = defaultdict(int)
        self.kept_on_node: dict[str, int] = defaultdict(int)
        self.preemptible: set[int] = set()  # running over-quota jobs outside reservations
        self.releases: dict[str, list[float]] = defaultdict(list)
        # Ends of the bookings holding GPUs now, per model: a job that waits for booked GPUs
        # gets its estimated start from them (the job page would otherwise say "no estimate").
        self.booking_releases: dict[str, list[float]] = defaultdict(list)
        self.queued: dict[int, QueuedJob] = {}
        # team -> (class, model, count, same_node) -> sorted [(order key, job id)]
        self.buckets: dict[str, dict[tuple, list[tuple]]] = {}
        self.reservation_jobs: dict[int, QueuedJob] = {}
        self._heads: dict[str, tuple] = {}  # team -> smallest queue key (see _head_key)
        self.active_bookings: dict[int, list[int]] = {}
        # team -> mode -> caps (see _caps), dropped when the team starts or stops a job
        self._caps_cache: dict[str, dict[str, dict[str, int] | None]] = {}
        # Bumped by every change of queue or running set; a preemption pass that found
        # nothing is not repeated until something changed or a new victim becomes eligible.
        self.version = 0
        self._no_preemption: tuple[int, float] | None = None
        self.gained = 0  # bumped whenever GPUs go back to the pool
        # job -> (gained, when the next victim becomes eligible, model) of its last failed
        # preemption: not tried again on that model before either changes
        self._preempt_failed: dict[int, tuple[int, float, str]] = {}
        # Teams whose queue or holdings changed since the last cycle ended. While no GPU went
        # back to the pool, every other team's next job still does not fit (capacity only
        # shrank), so a cycle need only look at these teams.
        self._dirty: set[str] = set()
        self._gain_mark: int | None = None
        self._team_retry: dict[str, float] = {}  # when a team's failed preemption may work
        self._frozen_models: list[str] | None = None  # models by free GPUs, while explaining
        # team -> its oldest job within its guarantee (``_drain``), kept until the team's queue
        # or holdings change (not for a team with bookings ahead: its room depends on time)
        self._drain_cands: dict[str, Candidate | None] = {}

    # -- changes between cycles --------------------------------------------------------------

    def enqueue(self, job: QueuedJob) -> None:
        self.version += 1
        self._dirty.add(job.team)
        self._drain_cands.pop(job.team, None)
        self.queued[job.job_id] = job
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

    def dequeue(self, job_id: int) -> QueuedJob:
        self.version += 1
        self._preempt_failed.pop(job_id, None)
        job = self.queued.pop(job_id)
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
            self.quotas.take(run.team, run.model, len(run.gpu_ids))
            if before >= 0 > before - len(run.gpu_ids):
                # The team goes above its guarantee: its older over-quota jobs may now yield,
                # so a preemption that failed before may work (as when GPUs come back).
                self.gained += 1
            self._caps_cache.pop(run.team, None)
            if self._is_preemptible(run):
                self.preemptible.add(run.job_id)
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
            self.quotas.give(run.team, run.model, len(run.gpu_ids))
            self._caps_cache.pop(run.team, None)
            self.preemptible.discard(job_id)
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

    # -- one cycle ---------------------------------------------------------------------------

    def cycle(self, now: float, usage: Mapping[str, float] | None = None) -> Decision:
        """Place what fits now, preempt what must stop; placements are applied to the engine
        (the jobs leave the queue and run), preempted jobs leave it (the caller requeues
        them). Every job queued at the start ends up placed, waiting for a preemption or
        (with ``explain``) pending with a reason."""
        self.now = now
        if self._nothing_to_do():
            self._gain_mark = self.gained
            self._dirty.clear()
            return Decision()
        self.usage = usage if usage is not None else {}
        self.decision = Decision()
        self.failed: dict[tuple[str, int, bool], float] = {}
        self.placed_by_team: dict[str, int] = defaultdict(int)
        self.placed_count = 0
        self.explained: dict[int, Pending] = {}
        if self.config.explain:
            self.initial_totals = dict(self.pool.total)
        self.restricted = self._gain_mark == self.gained
        if self.reservation_jobs:
            self._reservations()
        if self.policy == "fairshare":
            self._by_order(GUARANTEE)
            withheld = self._drain() if self.pool.free_count else []
            self._spare()
            if withheld:
                self.pool.give(withheld)
            # GPUs that preemptions free beyond what the waiting job takes were not offered
            # to anyone: the next cycle must look at every team again. So were GPUs held
            # back from the spare pass for a draining node.
            mark = None if withheld else self.gained
            if self.config.preemption_enabled and self.preemptible:
                self._preempt()
        else:
            self._by_order(BASELINE)
            mark = self.gained
        if self.config.explain:
            self._explain()
        if len(self.decision.pending) > 1:
            self.decision.pending.sort(key=lambda p: p.job_id)
        self._gain_mark = mark
        self._dirty.clear()
        return self.decision

    def _nothing_to_do(self) -> bool:
        """No GPU is free and no reservation job or preemption could start anything, and no
        explanation is asked for: every pass would return at once (the replayer sees this on
        most events of a busy day)."""
        return (
            self.pool.free_count == 0
            and self.pool.booked_count == 0
            and not self.reservation_jobs
            and not self.config.explain
            and not (
                self.policy == "fairshare" and self.config.preemption_enabled and self.preemptible
            )
        )

    def _teams(self) -> list[str]:
        """Teams that may have a job to place in this cycle (see ``_dirty``)."""
        # Unsorted: the passes order teams in heaps of (key, team), whatever the input order.
        if self.restricted and self.gained == self._gain_mark:
            return [t for t in self._dirty if t in self.buckets]
        return list(self.buckets)

    def _models_for(self, gpu_model: str | None) -> list[str]:
        if gpu_model is not None:
            return [gpu_model] if gpu_model in self.pool.capacity else []
        if len(self.pool.models) == 1:
            return self.pool.models
        if self._frozen_models is not None:
            return self._frozen_models
        return sorted(self.pool.models, key=lambda m: -self.pool.total.get(m, 0))

    def _cap(self, team: str, model: str, mode: str, pclass: PriorityClass | None) -> int:
        """GPUs of ``model`` the team may still take in a pass of ``mode``."""
        return self.quotas.room(team, model, guarantee=mode == GUARANTEE)

    def _caps(self, team: str, mode: str) -> dict[str, int] | None:
        """GPUs of each model the team may still take in a pass of ``mode``; None when it may
        take none at all. Kept until the team's GPUs change (``_caps_cache``)."""
        by_mode = self._caps_cache.get(team)
        if by_mode is None:
            by_mode = self._caps_cache[team] = {}
        else:
            cached = by_mode.get(mode, False)
            if cached is not False:
                return cached
        room = self.quotas.room
        caps = {}
        positive = False
        within_guarantee = mode == GUARANTEE
        for model in self.pool.models:
            cap = caps[model] = room(team, model, guarantee=within_guarantee)
            if cap > 0:
                positive = True
        result = by_mode[mode] = caps if positive else None
        return result

    def _candidate(self, team: str, mode: str, *, fitting: bool = True) -> Candidate | None:
        """The team's first queued job (queue order) that the pass may place now: within the
        quota bound of ``mode`` and, when ``fitting``, with room in the free GPUs."""
        shapes = self.buckets.get(team)
        pool = self.pool
        if not shapes or (fitting and pool.free_count == 0 and pool.booked_count == 0):
            return None
        caps = self._caps(team, mode)
        if caps is None:
            return None
        room: dict[tuple[str, bool], int] = {}  # (model, same node) -> largest gang that fits
        skip = _SKIPPED_CLASS.get(mode)
        # A team with bookings ahead: a job must fit beside them for its whole run.
        window = team in self.quotas.later
        # With one model (the common case) every job may run on it.
        any_model = pool.models if len(pool.models) == 1 else None
        best: Candidate | None = None  # a backfill candidate (its GPUs found already)
        best_entries = best_model = best_key = None  # or the head of a bucket that fits
        for (pclass, gpu_model, count, same_node), entries in shapes.items():
            if pclass == skip:
                continue
            head_key = entries[0][0]
            if best_key is not None and head_key >= best_key:
                continue
            for model in (gpu_model is None and any_model) or self._models_for(gpu_model):
                if count > caps.get(model, 0) or not (
                    runs := self._quota_runs(entries, model, mode, window, best_key)
                ):
                    continue
                if fitting and pool.booked_count and pool.has_booked(model):
                    if best is None and best_key is not None:
                        best = self._head_candidate(best_key, best_entries, best_model)
                    found = self._first_backfill(runs, model, count, same_node, best)
                    if found is not None:
                        best, best_key = found, found.key
                        break
                    continue
                if fitting:
                    key = (model, same_node)
                    fits = room.get(key)
                    if fits is None:
                        fits = room[key] = (
                            pool.max_free_on_node(model) if same_node else pool.total[model]
                        )
                    if count > fits:
                        continue
                best, best_entries, best_model, best_key = None, runs, model, runs[0][0]
                break
        if best is not None or best_key is None:
            return best
        return self._head_candidate(best_key, best_entries, best_model)

    def _quota_runs(self, entries: list, model: str, mode: str, window: bool, before) -> list:
        """The bucket's jobs the team's quota lets run on ``model``: all of them, unless the
        team has bookings ahead (``window``); then those whose whole run fits beside them,
        queued before ``before`` (a candidate found already)."""
        if not window:
            return entries
        return [
            entry
            for entry in entries
            if (before is None or entry[0] < before)
            and self._fits_quota_window(self.queued[entry[1]], model, mode)
        ]

    def _fits_quota_window(self, job: QueuedJob, model: str, mode: str) -> bool:
        """Whether the job's whole run fits its team's quota beside the team's bookings."""
        return self.quotas.fits_window(
            job.team,
            model,
            job.gpu_count,
            self.now,
            self.now + job.max_runtime,
            self.running.values(),
            self.config.grace_seconds,
            guarantee=mode == GUARANTEE,
        )

    def _head_candidate(self, key: tuple, entries: list, model: str) -> Candidate:
        return Candidate(key, self.queued[entries[0][1]], model, None)

    def _first_backfill(self, entries, model, count, same_node, best) -> Candidate | None:
        """With booked GPUs in play a shorter job deeper in the bucket may fit where the head
        does not; failed (shape, runtime) pairs are remembered for the cycle."""
        shape = (model, count, same_node)
        for key, job_id in entries:
            if best is not None and key >= best.key:
                return None
            job = self.queued[job_id]
            if self.failed.get(shape, math.inf) <= job.max_runtime:
                continue
            picks = self.pool.find(model, count, same_node, self.now + job.max_runtime)
            if picks is None:
                self.failed[shape] = min(self.failed.get(shape, math.inf), job.max_runtime)
                continue
            return Candidate(key, job, model, picks)
        return None

    def _place(self, cand: Candidate, over: bool, *, after_preemption: bool = False) -> bool:
        job = cand.job
        picks = cand.picks or self.pool.find(
            cand.model,
            job.gpu_count,
            job.same_node,
            self.now + job.max_runtime,
            self._packing(over),
        )
        if picks is None:  # cannot happen without booked GPUs; be safe
            self.failed[(cand.model, job.gpu_count, job.same_node)] = 0.0
            return False
        self.dequeue(job.job_id)
        self.add_running(running_from(job, tuple(picks), cand.model, self.now, over))
        placement = Placement(job.job_id, tuple(picks), over)
        if after_preemption:
            self.decision.after_preemption.append(placement)
        else:
            self.decision.placements.append(placement)
        self.placed_by_team[job.team] += 1
        self.placed_count += 1
        return True

    def _packing(self, over: bool):
        """Which nodes a placement avoids (``FreePool.find``): with ``config.pack_borrowed``
        (fairshare only), borrowed and guaranteed work keep apart; else best fit alone."""
        if self.policy != "fairshare" or not self.config.pack_borrowed:
            return None
        return self._avoid_guaranteed if over else self._avoid_borrowed

    def _avoid_guaranteed(self, node: str) -> bool:
        """Borrowed work goes where no guaranteed work runs, so a reclaim frees whole nodes."""
        return self.kept_on_node.get(node, 0) > 0

    def _avoid_borrowed(self, node: str) -> bool:
        """Guaranteed work keeps off nodes of borrowed work (see ``_avoid_guaranteed``)."""
        return self.lent_on_node.get(node, 0) > 0

    def _over(self, cand: Candidate, mode: str) -> bool:
        if mode == GUARANTEE:
            return False
        job = cand.job
        if job.priority_class == PriorityClass.PREEMPTIBLE:
            return True
        if job.team in self.quotas.later:
            return not self._fits_quota_window(job, cand.model, GUARANTEE)
        return self.quotas.over_guarantee(job.team, cand.model, job.gpu_count)

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

    def _still_fits(self, cand: Candidate) -> bool:
        """Whether a candidate found earlier in this pass is still its team's: true when it
        still fits, as the free GPUs only shrank since (so no earlier job of the team fits
        now) and the team's queue and quota did not change (only its own placements change
        them). Without booked GPUs, and for a job whose model cannot change."""
        pool, job = self.pool, cand.job
        if pool.booked_count or (job.gpu_model is None and len(pool.models) > 1):
            return False
        if job.same_node:
            return pool.max_free_on_node(cand.model) >= job.gpu_count
        return pool.total[cand.model] >= job.gpu_count

    def _head_key(self, team: str) -> tuple | None:
        """The smallest queue key of the team's jobs: no candidate of it comes earlier.
        Kept per team between cycles; enqueue lowers it, dequeuing the head forgets it."""
        head = self._heads.get(team)
        if head is None:
            shapes = self.buckets.get(team)
            if not shapes:
                return None
            head = self._heads[team] = min(entries[0][0] for entries in shapes.values())
        return head

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

    def _drain(self) -> list[int]:
        """Lead-time draining for guarantees that need room: for each team's oldest job within
        its guarantee that does not fit in the free GPUs, hold free GPUs back from the spare
        pass (over-quota work) so they add up instead of being lent again (``_drain_ids``).
        Recomputed every cycle from the state alone. Returns the GPUs held back (the caller
        gives them back)."""
        withheld: list[int] = []
        taken: set[str] = set()
        for team in sorted(self.buckets):
            if self._caps(team, GUARANTEE) is None:
                continue
            cand = self._drain_cands.get(team, False)
            if cand is False:
                cand = self._candidate(team, GUARANTEE, fitting=False)
                if team not in self.quotas.later:
                    self._drain_cands[team] = cand
            if cand is None:
                continue
            ids = self._drain_ids(team, cand, taken)
            if ids:
                self.pool.take(ids)
                withheld.extend(ids)
        return withheld

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
        """(when it has room, -free GPUs now, node) of ``_drain_node``'s node, or None."""
        pool, running, now = self.pool, self.running, self.now
        min_runtime = self.config.preempt_min_runtime_seconds
        best = None
        for node, free in pool.free[model].items():
            if node in taken or pool.node_size[model, node] < job.gpu_count:
                continue
            have = len(free)
            releases = []
            for jid in self.on_node.get(node, ()):
                r = running[jid]
                if r.model != model:
                    continue
                if jid in self.preemptible and r.team != job.team:
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
            key = (ready, -len(free), node)
            if best is None or key < best:
                best = key
        return best if best is not None and best[0] < math.inf else None

    def _spare(self) -> None:
        """The GPUs left, in ``config.spare_order``: by default the lowest effective share
        first (weighted fair share)."""
        if self.pool.exhausted():
            return
        order = self.config.spare_order
        if order == "share":
            # Lower bound: the share with the oldest job's aging (queue key = submit time).
            heap = [
                (self._share_at(team, key[0]), team, None)
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
        """Where the team's candidate stands in the spare pool (lowest first)."""
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

    # -- preemption --------------------------------------------------------------------------

    def _reservations(self) -> None:
        for job in sorted(self.reservation_jobs.values(), key=_order_key("fifo")):
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

    # -- why the others wait -----------------------------------------------------------------


def engine_from_state(
    state: ClusterState, policy: str = "fairshare", config: SchedulerConfig | None = None
) -> Engine:
    """An engine holding exactly what ``state`` describes."""
    engine = Engine(state.gpus, state.quotas, policy, config)
    for run in state.running:
        engine.add_running(run)
    engine.add_bookings(state.bookings, state.now)
    for job in state.queued:
        engine.enqueue(job)
    return engine


def schedule(
    state: ClusterState, policy: str = "fairshare", config: SchedulerConfig | None = None
) -> Decision:
    """Decide which queued jobs start now, which running jobs to preempt, and why others wait.

    Pure: reads ``state`` only and returns a ``Decision``. With ``config.explain`` (the
    default) every queued job ends up in exactly one of ``placements`` or ``pending``; jobs
    that will start on preempted GPUs are pending ``WAITING_FOR_PREEMPTION`` and are also
    listed in ``after_preemption``.
    """
    engine = engine_from_state(state, policy, config)
    return engine.cycle(state.now, state.usage)


__all__ = [
    "POLICIES",
    "SPARE_ORDERS",
    "Engine",
    "SchedulerConfig",
    "UsageMeter",
    "engine_from_state",
    "queue_order_key",
    "running_from",
    "schedule",
]
