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
   next, until nothing more fits. A team's first job within its guarantee that waits for a
   reclaim keeps the room it needs from the team's own later jobs, here and in step 3
   (``_hold``): they take only what the guarantee has beyond it.
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
   not restarted in the cycle that stopped it. A borrowed multi-node gang that would lose its
   work (``_costly_gang``) is taken past the job's patience only when other victims do not
   free the GPUs, or after ``gang_reclaim_patience_seconds``: stopped late, such a gang throws
   away days of many nodes. A gang that needs one whole node drains one ahead (see
   ``_drain``; not a costly gang's node): no over-quota work starts there while it waits, and
   the guarantee pass places other teams' work elsewhere while another node has room.

Within a team, ``fairshare`` takes jobs by least attained service first, in Tiresias'
discretized queues (``config.attained_level``: GPU-hours run in earlier attempts, so a job
preempted after running for hours goes behind its team's fresh work), then in the order of
their turn (``QueuedJob.turn``, from their user's virtual clock, ``usage.UserClock``: per-user
fair share inside a team), which is the submit time for jobs without a user; aging counts
from the turn.

``fifo`` and ``sjf`` are baselines: first-fit in submit order / shortest ``max_runtime`` first,
respecting quota limits, no guarantees, no fair share, no preemption.

Placement is gang (all GPUs or none) and topology-aware (see ``FreePool.find``): one node when
it can, required when ``same_node``; otherwise the fewest nodes, one NVLink domain if possible,
else one rack (the node label ``rack``) if possible.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain, takewhile

from apps.jobs.scheduler.baseline import BaselineMixin
from apps.jobs.scheduler.config import (
    _SKIPPED_CLASS,
    POLICIES,
    SPARE_ORDERS,
    SchedulerConfig,
    queue_order_key,
    running_from,
)
from apps.jobs.scheduler.drain import DrainMixin
from apps.jobs.scheduler.explain import ExplainMixin
from apps.jobs.scheduler.modes import BASELINE, GUARANTEE, SPARE, Candidate
from apps.jobs.scheduler.pool import FreePool
from apps.jobs.scheduler.preemption import PreemptionMixin
from apps.jobs.scheduler.queue import QueueMixin
from apps.jobs.scheduler.quotas import QuotaBook
from apps.jobs.scheduler.spare import SpareMixin
from apps.jobs.scheduler.state import (
    ClusterState,
    Decision,
    GpuInfo,
    Pending,
    Placement,
    PriorityClass,
    QueuedJob,
    ResumingNode,
    RunningJob,
    TeamQuota,
)
from apps.jobs.scheduler.units import UnitDistance
from apps.jobs.scheduler.usage import UsageMeter
from apps.teams.org_tree import OrgTree
from apps.teams.quota_rule import UnitQuotaRow


class Engine(QueueMixin, BaselineMixin, SpareMixin, DrainMixin, PreemptionMixin, ExplainMixin):
    """Scheduler state kept between cycles; see the module docstring."""

    def __init__(
        self,
        gpus: list[GpuInfo],
        quotas: list[TeamQuota],
        policy: str = "fairshare",
        config: SchedulerConfig | None = None,
        unit_quotas: list[UnitQuotaRow] = (),
        tree: OrgTree | None = None,
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
        self.quotas = QuotaBook(quotas, unit_quotas, tree)
        self.units = UnitDistance(self.quotas, tree)
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
        # GPUs of those per model and per (team, model): what a reclaim could free (``_hold``)
        self.lent: dict[str | tuple[str, str], int] = defaultdict(int)
        self.releases: dict[str, list[float]] = defaultdict(list)
        # Ends of the bookings holding GPUs now, per model: a job that waits for booked GPUs
        # gets its estimated start from them (the job page would otherwise say "no estimate").
        self.booking_releases: dict[str, list[float]] = defaultdict(list)
        self.queued: dict[int, QueuedJob] = {}
        # Queued jobs stopped before (``QueuedJob.preemptions``): the ones ``_may_borrow``
        # may turn away, and the ones ``_explain`` answers one by one
        self.restarted: set[int] = set()
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
        # job -> when its reclaim clock started, for queued jobs that came without one
        self._reclaim_clocks: dict[int, float] = {}
        # Teams whose queue or holdings changed since the last cycle ended. While no GPU went
        # back to the pool, every other team's next job still does not fit (capacity only
        # shrank), so a cycle need only look at these teams.
        self._dirty: set[str] = set()
        self._gain_mark: int | None = None
        self._team_retry: dict[str, float] = {}  # when a team's failed preemption may work
        self._frozen_models: list[str] | None = None  # models by free GPUs, while explaining
        self.resuming: list[ResumingNode] = []  # nodes powering up (see ``explain``)
        # team -> its oldest job within its guarantee (``_drain``), kept until the team's queue
        # or holdings change (not for a team with bookings ahead: its room depends on time),
        # or, for a job of any model on several models, until the next cycle (``cycle``)
        self._drain_cands: dict[str, Candidate | None] = {}
        self._draining: frozenset[str] = frozenset()  # see ``_avoid_draining``
        # (job, model) -> node -> when the node has room for the job (``_drain_node_key``),
        # for one (version, time)
        self._node_keys: dict[tuple[int, str], dict[str, tuple]] = {}
        self._node_keys_at: tuple[int, float] | None = None

    # -- changes between cycles --------------------------------------------------------------

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
        if len(self.pool.models) > 1:
            # A job of any model goes for the model with the most free GPUs (``_models_for``),
            # which other teams' starts and ends change without touching its team: found
            # again, as an engine rebuilt from the state would, so the drain and the hold
            # keep room on the model it would pick now.
            cands = self._drain_cands
            for team in [t for t, c in cands.items() if c is not None and c.job.gpu_model is None]:
                del cands[team]
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
            self._draining = self._drain_nodes() if self.pool.free_count else frozenset()
            self._by_order(GUARANTEE)
            self._draining = frozenset()
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
        hold = self._hold(team) if fitting and mode != BASELINE else None
        best: Candidate | None = None  # a backfill candidate (its GPUs found already)
        best_entry = best_model = best_key = None  # or the head of a bucket that fits
        for (pclass, gpu_model, count, same_node), entries in shapes.items():
            if pclass == skip:
                continue
            head_key = entries[0][0]
            if best_key is not None and head_key >= best_key:
                continue
            for model in (gpu_model is None and any_model) or self._models_for(gpu_model):
                if count > caps.get(model, 0) or not (
                    allowed := self._quota_runs(
                        team, entries, model, mode, window, best_key, hold, count
                    )
                ):
                    continue
                first, runs = allowed
                if fitting and pool.booked_count and pool.has_booked(model):
                    if best is None and best_key is not None:
                        best = self._head_candidate(best_key, best_entry, best_model)
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
                best, best_entry, best_model, best_key = None, first, model, first[0]
                break
        if best is not None or best_key is None:
            return best
        return self._head_candidate(best_key, best_entry, best_model)

    def _hold(self, team: str) -> tuple[Candidate, int] | None:
        """What the team's top job within its guarantee keeps back from the team's own later
        jobs, as (that job, GPUs of its model a later job may still take within the guarantee
        without leaving too few for it); None when there is no such job.

        Without it, a later, smaller job of the team that fits the free GPUs starts first
        ("first job that fits") and fills the guarantee, so the top job, which needed a
        reclaim, is no longer within the guarantee and waits until the team's own work ends:
        a stream of small jobs starves it. With it the top job stays within the guarantee
        and the reclaim starts it after the victims' minimum runtime (like a backfill
        scheduler keeping the top job's start). Bounded: only while a reclaim could start the
        top job (the free GPUs of its model and other teams' preemptible ones add up to it;
        else it waits for work to end, and holding GPUs back would idle them for hours);
        later jobs still run where the guarantee has room for both, and on other models; and
        no GPU idles for it beyond what ``_drain`` holds back: other teams' work still takes
        the free GPUs (borrowed, so a reclaim gives them back). Teams with bookings ahead are
        left out (their room depends on time)."""
        if team in self.quotas.later:
            return None
        top = self._drain_cands.get(team, False)
        if top is False:
            top = self._drain_cands[team] = self._candidate(team, GUARANTEE, fitting=False)
        if top is None:
            return None
        model, need = top.model, top.job.gpu_count
        lent = self.lent
        if self.pool.total.get(model, 0) + lent[model] - lent[(team, model)] < need:
            return None  # no reclaim can start it now: nothing to keep back for
        return top, self.quotas.room(team, model, guarantee=True) - need

    @staticmethod
    def _unheld(hold: tuple[Candidate, int], model: str, count: int, entries: list):
        """``_quota_runs`` for a team whose top job keeps room (``_hold``): all of the
        bucket's jobs (of ``count`` GPUs) where the guarantee has room for them beside that
        job, else only that job and the team's jobs before it (None: none of them)."""
        top, spare = hold
        first = entries[0]
        if model != top.model or count <= spare:
            return first, entries
        if first[0] > top.key:
            return None
        return first, takewhile(lambda entry: entry[0] <= top.key, entries)

    def _held_back(self, job: QueuedJob) -> Candidate | None:
        """The team's top job that ``job`` waits behind (``_hold``), if it does on every
        model it may run on."""
        hold = self._hold(job.team)
        if hold is None:
            return None
        top, spare = hold
        if job.gpu_count <= spare or top.job.job_id == job.job_id:
            return None
        if self.queue_order(job) < top.key or self._models_for(job.gpu_model) != [top.model]:
            return None
        return top

    def _quota_runs(
        self,
        team: str,
        entries: list,
        model: str,
        mode: str,
        window: bool,
        before,
        hold,
        count: int,
    ) -> tuple[tuple, Iterable[tuple]] | None:
        """The first of the bucket's jobs (of ``count`` GPUs) the team's quota lets run on
        ``model`` and all of them from it on (None: none): all of them, unless the team's
        top job keeps room (``hold``, see ``_unheld``) or the team has bookings ahead
        (``window``; never both); then those queued before ``before`` (a candidate found
        already) whose whole run fits beside them, found lazily: the head pass needs the
        first, a backfill no more than it tries. On borrowed GPUs, not the jobs that restart
        only within the guarantee (``_may_borrow``)."""
        if window:
            runs = self._window_runs(entries, model, mode, before)
        elif hold is not None:
            found = self._unheld(hold, model, count, entries)
            if found is None:
                return None
            runs = found[1]
        else:
            runs = entries
        if mode == SPARE and self.restarted and self._borrows(team, model, count):
            # Past the jobs that may not borrow, and as the other paths, before ``before``
            # only: the caller compares the bucket's head with it, not the first it returns.
            if before is not None:
                runs = takewhile(lambda entry: entry[0] < before, runs)
            queued = self.queued
            runs = (entry for entry in runs if self._may_borrow(queued[entry[1]]))
        elif not window:
            return entries[0], runs
        runs = iter(runs)
        first = next(runs, None)
        return None if first is None else (first, chain((first,), runs))

    def _borrows(self, team: str, model: str, count: int) -> bool:
        """Whether a job of ``count`` GPUs of ``model`` would run on borrowed GPUs now (beyond
        its team's guarantee), though the guarantee is large enough for it."""
        quotas = self.quotas
        return quotas.over_guarantee(team, model, count) and (
            count <= quotas.rule.guarantee_ceiling(team, model)
        )

    def _may_borrow(self, job: QueuedJob) -> bool:
        """Whether the job may start on borrowed GPUs: not one a reclaim stopped before that
        would lose its work again and whose runtime limit is over
        ``config.reborrow_max_runtime_seconds`` (a day). Such a job, borrowing again, is
        likely stopped again, later and at a higher loss, so it waits for room within its
        team's guarantee, where nothing stops it (``_borrows`` leaves out a job larger than
        the guarantee: it could not run otherwise). Scavenger jobs (the Preemptible class)
        always may."""
        return (
            job.preemptions == 0
            or job.checkpointable
            or job.max_runtime <= self.config.reborrow_max_runtime_seconds
            or job.priority_class == PriorityClass.PREEMPTIBLE
        )

    def _window_runs(self, entries: list, model: str, mode: str, before) -> Iterator[tuple]:
        """The bucket's jobs queued before ``before`` whose whole run on ``model`` fits beside
        the team's bookings ahead (and its units')."""
        # A bucket's jobs differ only in their runtime here: one answer per runtime.
        fits: dict[float, bool] = {}
        queued = self.queued
        for entry in entries:
            if before is not None and entry[0] >= before:
                return  # the bucket is in queue order
            job = queued[entry[1]]
            ok = fits.get(job.max_runtime)
            if ok is None:
                ok = fits[job.max_runtime] = self._fits_quota_window(job, model, mode)
            if ok:
                yield entry

    def _fits_quota_window(self, job: QueuedJob, model: str, mode: str) -> bool:
        """Whether the job's whole run fits its team's quota beside the team's bookings."""
        return self.quotas.fits_window(
            job.team,
            model,
            job.gpu_count,
            self.now,
            self.now + job.max_runtime,
            self.config.grace_seconds,
            guarantee=mode == GUARANTEE,
        )

    def _head_candidate(self, key: tuple, entry: tuple, model: str) -> Candidate:
        return Candidate(key, self.queued[entry[1]], model, None)

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
        if self.policy != "fairshare":
            return None
        if not self.config.pack_borrowed:
            return self._avoid_draining if self._draining else None
        return self._avoid_guaranteed if over else self._avoid_borrowed

    def _avoid_draining(self, node: str) -> bool:
        """Guaranteed work keeps off a node that drains for a whole-node job (``_drain``)
        while another node has room: the node empties sooner and the job needs no reclaim."""
        return node in self._draining

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

    def _still_fits(self, cand: Candidate) -> bool:
        """Whether a candidate found earlier in this pass is still its team's: true when it
        still fits, as the free GPUs only shrank since (so no earlier job of the team fits
        now) and the team's queue and quota did not change (only its own placements change
        them). Without booked GPUs, for a job whose model cannot change, and outside a unit
        with a quota row (other teams' placements change its room)."""
        pool, job = self.pool, cand.job
        if pool.booked_count or (job.gpu_model is None and len(pool.models) > 1):
            return False
        if self.quotas.rule.has_unit_rows and self.quotas.shares(job.team)[0]:
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

    # -- preemption --------------------------------------------------------------------------

    # -- why the others wait -----------------------------------------------------------------


def engine_from_state(
    state: ClusterState, policy: str = "fairshare", config: SchedulerConfig | None = None
) -> Engine:
    """An engine holding exactly what ``state`` describes."""
    engine = Engine(state.gpus, state.quotas, policy, config, state.unit_quotas, state.org_tree)
    for run in state.running:
        engine.add_running(run)
    engine.add_bookings(state.bookings, state.now)
    engine.enqueue_many(state.queued)
    engine.resuming = list(state.resuming)
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
