"""Replay a job trace in simulated time with the live scheduler. Pure Python, no Django.

``simulate(jobs, gpus, quotas, policy)`` is event-driven: at every instant where a job arrives
or ends it runs one scheduling cycle, starts what it places, stops what it preempts and moves
on to the next event. It keeps one ``Engine`` for the whole replay and tells it only what
changed (``incremental=True``, the default); ``incremental=False`` instead loads a fresh engine
from a full ``ClusterState`` at every event through ``schedule()``, exactly as the live
dispatcher does, and must make the same decisions (a property test checks it).

A job runs for its trace ``duration``. Its ``max_runtime`` (what the scheduler is told) is the
trace's own limit when it gives one, else, as users give limits, the duration rounded up to the
next class of ``RUNTIME_LIMIT_CLASSES`` (1 h, 4 h, 24 h, 72 h, 7 d; then whole weeks), so that
orders by ``max_runtime`` (``sjf``, the ``slowdown`` spare order) know no more than a live
cluster does; ``runtime_limits="exact"`` tells the scheduler the true duration instead (an
oracle, for reference only). Unless the trace
gives one. A job larger than every node is a multi-node gang. A preempted job goes back to the
queue: a ``checkpointable`` one resumes with the work it had done, any other restarts from the
beginning and its attempt's GPU-seconds count as lost. Jobs that could never fit (more GPUs
than the fleet / model / quota limit allows) are left out and counted.

Metrics (``ReplayResult``): utilization (GPU-seconds run / GPUs x makespan), makespan, JCT and
wait (submit to final start) average / p50 / p95, slowdown ((end - submit) / duration, duration
floored at 10 s), fairness = Jain's index over per-team average slowdown, preemptions and
GPU-hours lost; per team: jobs, average and p95 wait, average slowdown, GPU-hours, and hours
spent below its guarantee while it had queued work; per job the time it waited with its team's
unused guarantee fitting it after the team's waiting jobs ahead of it (``room_clock``); queue
length over time; one row per job (``job_rows``, see ``JOB_COLUMNS``); fully idle node-hours
and, with ``power_saving``, node-hours powered off, energy saved and power cycles
(``replay_power``).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from apps.fleet.power_rules import PowerSaving
from apps.jobs.scheduler.config import SchedulerConfig, queue_order_key, running_from
from apps.jobs.scheduler.core import Engine, schedule
from apps.jobs.scheduler.quota_file import OrgUnits
from apps.jobs.scheduler.quotas import QuotaBook
from apps.jobs.scheduler.replay_power import DEFAULT_IDLE_WATTS, NodeClock
from apps.jobs.scheduler.replay_results import (  # noqa: F401 - replay's public names
    JOB_COLUMNS,
    SLOWDOWN_FLOOR_SECONDS,
    ReplayResult,
    format_table,
    jain_index,
    replay_result,
    write_job_rows,
)
from apps.jobs.scheduler.room_clock import GuaranteeRoomClock
from apps.jobs.scheduler.state import (
    ClusterState,
    Decision,
    GpuInfo,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
)
from apps.jobs.scheduler.trace_jobs import FleetSizes, TraceJob, admissible
from apps.jobs.scheduler.usage import UsageMeter, UserClock

HOUR, DAY = 3600.0, 86400.0
RUNTIME_LIMIT_CLASSES = (HOUR, 4 * HOUR, 24 * HOUR, 72 * HOUR, 7 * DAY)
RUNTIME_LIMITS = ("classes", "exact")
PROGRESS_EVERY_EVENTS = 5000


@dataclass(slots=True)
class _JobRecord:
    job: TraceJob
    attempts: int = 0
    preemptions: int = 0
    first_start: float | None = None
    final_start: float | None = None
    end: float | None = None
    lost: float = 0.0
    done: float = 0.0  # work kept from earlier attempts (checkpointable jobs)
    attained: float = 0.0  # GPU-seconds run in all attempts so far
    within_guarantee: bool = False  # see JOB_COLUMNS
    room_wait: float = 0.0  # see JOB_COLUMNS
    room_key: tuple | None = None  # its place in its team's order, as ``GuaranteeRoomClock``
    turn: float | None = None  # its turn in its team's queue (``UserClock``), set on arrival
    reclaim_since: float | None = None  # see ``QueuedJob.reclaim_since``


def user_runtime_limit(duration: float) -> float:
    """The runtime limit a user would have given a job that ran ``duration`` seconds: the
    smallest of ``RUNTIME_LIMIT_CLASSES`` it fits, beyond them whole weeks."""
    for limit in RUNTIME_LIMIT_CLASSES:
        if duration <= limit:
            return limit
    return math.ceil(duration / (7 * DAY)) * 7 * DAY


def simulate(
    jobs: list[TraceJob],
    gpus: list[GpuInfo],
    quotas: list[TeamQuota],
    policy: str,
    config: SchedulerConfig | None = None,
    *,
    incremental: bool = True,
    decisions: list | None = None,
    progress: Callable[[float], None] | None = None,
    runtime_limits: str = "classes",
    power_saving: PowerSaving | None = None,
    idle_watts: float = DEFAULT_IDLE_WATTS,
    units: OrgUnits | None = None,
) -> ReplayResult:
    """Replay ``jobs`` on ``gpus`` under ``policy``; see the module docstring. When given,
    ``decisions`` receives (time, placements, preemptions) of every cycle that did something,
    and ``progress`` is told every few thousand events the share of the jobs submitted so far
    (0 to 1). ``runtime_limits``: what the scheduler is told of jobs without a limit of their
    own, "classes" (the duration rounded up to a user's class) or "exact" (the duration).
    ``power_saving``: power idle nodes down and wake them for queued work (``replay_power``);
    a powered-off node draws ``idle_watts`` less than an idle one. ``units``: the
    organisation units above the teams, with their quota rows (``quota_file``)."""
    if runtime_limits not in RUNTIME_LIMITS:
        raise ValueError(
            f"Unknown runtime limits {runtime_limits!r}; choose one of {', '.join(RUNTIME_LIMITS)}."
        )
    config = replace(config or SchedulerConfig(), explain=False)
    units = units or OrgUnits()
    arrivals, never_fit = admissible(jobs, FleetSizes(gpus, quotas, units))
    replay = _Replay(arrivals, gpus, quotas, policy, config, incremental, decisions, units)
    replay.nodes = NodeClock(gpus, replay.first, power_saving, idle_watts, *replay.pool_changes())
    if runtime_limits == "exact":
        replay.limit_of = float
    replay.progress = progress
    replay.run()
    return replay.finish(jobs, never_fit)


class _Replay:
    """The state of one replay and the steps of its event loop.

    ``run`` repeats: advance the clock to the next arrival or end, stop the jobs that ended,
    admit the arrivals, one scheduling ``cycle``, ``sample`` the queue.
    ``enqueue``/``start``/``stop`` are the only places that change the queue or the running
    set, so the engine (when incremental), the usage meter and the per-team bookkeeping (GPUs
    held, jobs queued, time below guarantee) always move together."""

    def __init__(
        self,
        arrivals: list[TraceJob],
        gpus: list[GpuInfo],
        quotas: list[TeamQuota],
        policy: str,
        config: SchedulerConfig,
        incremental: bool,
        decisions: list | None,
        units: OrgUnits,
    ) -> None:
        self.arrivals = arrivals
        self.units = units
        self.gpus = gpus
        self.quotas = quotas
        self.policy = policy
        self.config = config
        self.decisions = decisions
        self.records = {j.job_id: _JobRecord(j) for j in arrivals}
        self.model_of = {g.gpu_id: g.model for g in gpus}
        self.engine = (
            Engine(gpus, quotas, policy, config, units.rows, units.tree) if incremental else None
        )
        self.meter = UsageMeter(config.usage_half_life_seconds)
        self.queue: dict[int, QueuedJob] = {}
        self.running: dict[int, RunningJob] = {}
        self.ends: list[tuple[float, int, int]] = []  # (end time, job id, attempt)
        # (time an over-quota attempt may be preempted, job id, attempt): while a team is below
        # its guarantee with work queued, the replay runs a cycle then, as the live cycle
        # (every minute) would, so a reclaim lands when the victims' minimum runtime is up
        # and not only at the next arrival or end.
        self.wakes: list[tuple[float, int, int]] = []
        self.reclaims = (
            policy == "fairshare"
            and config.preemption_enabled
            and any(q.guaranteed > 0 for q in quotas)
        )
        self.gpu_seconds: dict[str, float] = defaultdict(float)
        self.model_seconds: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.preemptions = 0

        self.guaranteed: dict[str, int] = defaultdict(int)
        for q in quotas:
            self.guaranteed[q.team] += q.guaranteed
        self.held: dict[str, int] = defaultdict(int)
        # GPUs running per quota key (team, model or None), to tell within-guarantee jobs
        self.book = QuotaBook(quotas, units.rows, units.tree)
        self.models = sorted({g.model for g in gpus})
        self.room_clock = GuaranteeRoomClock(self.book, self.models)
        self.queue_order = queue_order_key(policy)
        self.queued_per_team: dict[str, int] = defaultdict(int)
        self.below: set[str] = set()
        self.below_seconds: dict[str, float] = defaultdict(float)

        self.first = arrivals[0].submit if arrivals else 0.0
        span = (arrivals[-1].submit - self.first) if arrivals else 0.0
        # About 1,500 samples over the trace, but never closer than a minute.
        self.sample_every = max(60.0, span / 1500.0)
        self.queue_length: list[tuple[float, int]] = []
        self.next_sample = self.first
        self.next_arrival = 0
        self.now = self.first
        self.progress: Callable[[float], None] | None = None
        # The runtime limit of a job that gives none: a user's class of its duration.
        self.limit_of: Callable[[float], float] = user_runtime_limit
        self.user_clock = UserClock() if policy == "fairshare" else None

    def pool_changes(self) -> tuple:
        """How a node powering down / resuming takes its GPUs out of / back to the engine's
        pool (without an engine, ``_decide`` leaves the off GPUs out of each cycle's state)."""
        if self.engine is None:
            return (lambda ids: None, lambda ids: None)
        return (self.engine.withdraw, self.engine.restore)

    # -- changes to the queue and the running set ---------------------------------------------

    def _flag(self, team: str) -> None:
        """Keep ``below`` (teams under their guarantee with work queued) current."""
        if self.queued_per_team[team] and self.held[team] < self.guaranteed.get(team, 0):
            self.below.add(team)
        else:
            self.below.discard(team)

    def _queued_of(self, rec: _JobRecord) -> QueuedJob:
        """The job as the scheduler sees it: only the work left, and the runtime limit less
        what a checkpointed job already did."""
        j = rec.job
        remaining = j.duration - rec.done
        limit = (j.max_runtime or self.limit_of(j.duration)) - rec.done
        return QueuedJob(
            j.job_id,
            j.team,
            j.model,
            j.gpus,
            max(1.0, limit if limit > 0 else remaining),
            j.submit,
            PriorityClass.OVER_QUOTA,
            j.same_node,
            None,
            j.checkpointable,
            rec.preemptions,
            rec.attained,
            rec.turn,
            rec.reclaim_since,
        )

    def enqueue(self, rec: _JobRecord) -> None:
        q = self._queued_of(rec)
        if self.engine is not None:
            self.engine.enqueue(q)
        self.queue[q.job_id] = q
        self.queued_per_team[q.team] += 1
        self._flag(q.team)

    def start(self, placement, at: float) -> None:
        rec = self.records[placement.job_id]
        j = rec.job
        q = self.queue.pop(j.job_id)
        self.queued_per_team[j.team] -= 1
        run = self.engine.running.get(j.job_id) if self.engine is not None else None
        if run is None:  # rebuilt every event: the engine is gone
            model = self.model_of[placement.gpu_ids[0]]
            run = running_from(q, placement.gpu_ids, model, at, placement.over_quota)
        self.running[j.job_id] = run
        rec.attempts += 1
        # The clock timed this wait; a preempted attempt's next wait starts its own (as the
        # live portal clears ``Job.reclaim_since`` when a job leaves the queue).
        rec.reclaim_since = None
        if rec.first_start is None:
            rec.first_start = at
            if rec.room_key is not None:
                rec.room_wait = self.room_clock.started(j.team, j.model, rec.room_key, at)
        rec.final_start = at
        # The attempt number tells a stale end (of an attempt since preempted) from this one.
        heapq.heappush(self.ends, (at + j.duration - rec.done, j.job_id, rec.attempts))
        if self.reclaims and run.over_quota:
            eligible = at + self.config.preempt_min_runtime_seconds
            heapq.heappush(self.wakes, (eligible, j.job_id, rec.attempts))
        self.meter.change(j.team, j.gpus, at)
        self.nodes.occupy(run.gpu_ids, at)
        self.held[j.team] += j.gpus
        self.book.take(j.team, run.model, j.gpus)
        self.room_clock.changed(j.team, at)
        self._flag(j.team)

    def stop(self, job_id: int, at: float) -> RunningJob:
        """Take a job off its GPUs (ended or preempted) and account the GPU-time it used."""
        r = self.running.pop(job_id)
        if self.engine is not None and job_id in self.engine.running:
            self.engine.remove_running(job_id)
        used = len(r.gpu_ids) * (at - r.started_at)
        self.gpu_seconds[r.team] += used
        self.model_seconds[r.team, r.model][0] += used
        if r.over_quota:
            self.model_seconds[r.team, r.model][1] += used
        self.meter.change(r.team, -len(r.gpu_ids), at)
        self.nodes.release(r.gpu_ids, at)
        self.held[r.team] -= len(r.gpu_ids)
        self.book.give(r.team, r.model, len(r.gpu_ids))
        self.room_clock.changed(r.team, at)
        self._flag(r.team)
        return r

    def within_guarantee(self, job: TraceJob) -> bool:
        """Whether the team's running GPUs of the job's model plus the job's fit its guarantee
        (a job of any model: on some model)."""
        room = self.book.room
        models = [job.model] if job.model else self.models
        return any(job.gpus <= room(job.team, m, guarantee=True) for m in models)

    # -- the event loop -----------------------------------------------------------------------

    def run(self) -> None:
        """The event loop; ``advance``, ``finish_ended`` and ``admit`` written out inline, as
        this loop runs once per event (hundreds of thousands of times for a real trace)."""
        arrivals = self.arrivals
        arriving = [self.records[j.job_id] for j in arrivals]
        count = len(arrivals)
        ends, records, wakes = self.ends, self.records, self.wakes
        below, below_seconds = self.below, self.below_seconds
        running, enqueue, stop = self.running, self.enqueue, self.stop
        heappop, inf = heapq.heappop, math.inf
        progress, events = self.progress, 0
        i, now, nodes = self.next_arrival, self.now, self.nodes
        while i < count or ends or (self.queue and nodes.pending(now)):
            # advance: to the next arrival, end or power timer, charging the time to teams
            # below guarantee
            t = arrivals[i].submit if i < count else inf
            if ends and ends[0][0] < t:
                t = ends[0][0]
            if below and wakes:
                t = self._next_wake(t)
            t = min(t, nodes.next_at())
            if t == inf:
                break
            if t < now:
                t = now
            for team in below:
                below_seconds[team] += t - now
            self.now = now = t
            # finish_ended: ends of earlier attempts (since preempted) are skipped
            while ends and ends[0][0] <= now:
                _, job_id, attempt = heappop(ends)
                rec = records[job_id]
                if job_id in running and rec.attempts == attempt:
                    stop(job_id, now)
                    rec.end = now
            # admit
            while i < count and arrivals[i].submit <= now:
                rec = arriving[i]
                rec.within_guarantee = self.within_guarantee(rec.job)
                if self.user_clock is not None and rec.job.user is not None:
                    j = rec.job
                    rec.turn = self.user_clock.turn(
                        j.team,
                        j.user,
                        j.submit,
                        j.gpus * (j.max_runtime or self.limit_of(j.duration)),
                        self.guaranteed.get(j.team, 0),
                    )
                enqueue(rec)
                # the team's order of first waits: the scheduler's order of the job as it comes
                j = rec.job
                rec.room_key = self.queue_order(self.queue[j.job_id])
                self.room_clock.wait(j.team, j.model, j.gpus, rec.room_key, now)
                if rec.within_guarantee and self.reclaims:
                    self._wake_after_patience(rec.job.job_id, now)
                i += 1
            self.next_arrival = i
            nodes.resume_due(now)
            if self.queue:
                self.cycle()
            nodes.after_cycle(now, self.queue.values(), self._room)
            if now >= self.next_sample:
                self.sample()
            events += 1
            if progress is not None and events % PROGRESS_EVERY_EVENTS == 0:
                progress(i / count)

    def _next_wake(self, t: float) -> float:
        """The earlier of ``t`` and the next time a running over-quota attempt becomes
        preemptible or a waiting within-guarantee job's patience is up (past ones, and those of
        attempts since stopped or jobs since started, are dropped)."""
        wakes, running, records, now = self.wakes, self.running, self.records, self.now
        queue = self.queue
        while wakes:
            when, job_id, attempt = wakes[0]
            if when > now and (
                (job_id in queue and records[job_id].attempts == 0)
                if attempt == 0
                else (job_id in running and records[job_id].attempts == attempt)
            ):
                return min(t, when)
            heapq.heappop(wakes)
        return t

    def _wake_after_patience(self, job_id: int, since: float) -> None:
        """Wake (attempt 0: while the job still waits) when its patience is up, and when
        the longer one for multi-node gangs is (``gang_reclaim_patience_seconds``)."""
        cfg = self.config
        for patience in {cfg.reclaim_patience_seconds, cfg.gang_reclaim_patience_seconds}:
            heapq.heappush(self.wakes, (since + patience, job_id, 0))

    def _room(self, team: str, model: str) -> int:
        return self.book.room(team, model, guarantee=False)

    def cycle(self) -> None:
        decision = self._decide()
        self._apply(decision)
        self.preemptions += len(decision.preemptions)
        self._record(decision)

    def _decide(self) -> Decision:
        """One scheduling cycle: the kept engine told only what changed, or (not incremental)
        a fresh one from the full state, as the live dispatcher does."""
        if self.engine is not None:
            return self.engine.cycle(self.now, self.meter.view(self.now))
        off = self.nodes.off_gpu_ids
        state = ClusterState(
            self.now,
            [g for g in self.gpus if g.gpu_id not in off] if off else self.gpus,
            list(self.queue.values()),
            list(self.running.values()),
            [],
            self.quotas,
            self.meter.snapshot(self.now),
            unit_quotas=self.units.rows,
            org_tree=self.units.tree,
        )
        return schedule(state, self.policy, self.config)

    def _apply(self, decision: Decision) -> None:
        now = self.now
        for job_id, since in decision.reclaim_clocks.items():
            # carried in the queued job, so a fresh engine next cycle counts from the same time
            rec = self.records[job_id]
            rec.reclaim_since = since
            self.queue[job_id] = replace(self.queue[job_id], reclaim_since=since)
            if self.reclaims and rec.attempts == 0:
                self._wake_after_patience(job_id, since)
        for pre in decision.preemptions:
            r = self.stop(pre.job_id, now)
            rec = self.records[pre.job_id]
            rec.preemptions += 1
            rec.attained += len(r.gpu_ids) * (now - r.started_at)
            if rec.job.checkpointable:
                rec.done += now - r.started_at
            else:
                rec.lost += len(r.gpu_ids) * (now - r.started_at)
                rec.done = 0.0
        for placement in decision.placements:
            self.start(placement, now)
        for placement in decision.after_preemption:
            self.start(placement, now)
        # Victims queue again after the cycle: never restarted in the cycle that stopped them.
        for pre in decision.preemptions:
            self.enqueue(self.records[pre.job_id])

    def _record(self, decision: Decision) -> None:
        """Keep the cycle's decisions for the caller (the property test compares them)."""
        if self.decisions is None:
            return
        if decision.placements or decision.preemptions or decision.after_preemption:
            self.decisions.append(
                (
                    self.now,
                    [(p.job_id, p.gpu_ids, p.over_quota) for p in decision.placements],
                    [(p.job_id, p.for_job_id) for p in decision.preemptions],
                    [(p.job_id, p.gpu_ids) for p in decision.after_preemption],
                )
            )

    def sample(self) -> None:
        if self.now >= self.next_sample:
            self.queue_length.append((self.now - self.first, len(self.queue)))
            self.next_sample = self.now + self.sample_every

    def finish(self, jobs: list[TraceJob], never_fit: int) -> ReplayResult:
        return replay_result(
            self.policy,
            jobs,
            never_fit,
            self.preemptions,
            self.records,
            self.gpus,
            self.gpu_seconds,
            self.model_seconds,
            self.below_seconds,
            self.queue_length,
            self.first,
            self.nodes.totals(self.now),
        )
