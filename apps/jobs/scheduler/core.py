"""One scheduling cycle: ``schedule(state, policy, config) -> Decision``.

Pure Python, no Django. The live dispatcher and the trace replayer call the same function.

Order of work in a ``fairshare`` cycle:

1. Jobs bound to a reservation run on that booking's GPUs while the booking is active.
2. Guaranteed share: jobs of a team that fit within its guaranteed GPUs of the model, oldest
   first (aging included).
3. Weighted fair share of the spare capacity: the team with the lowest dominant share goes
   next (recent GPU-hours decayed with a half-life plus GPUs held now, divided by the team's
   weight = its guaranteed GPUs); only teams under their quota ``limit``. Waiting time lowers
   a team's effective share (aging), so nothing starves.
4. Preemption: a job still waiting within its team's guarantee may stop over-quota running
   work of other teams, newest first. Those GPUs are not reused in this cycle; the job waits
   with ``WAITING_FOR_PREEMPTION``.

``fifo`` and ``sjf`` are baselines: first-fit in submit order / shortest ``max_runtime`` first,
respecting quota limits, no guarantees, no fair share, no preemption.

Placement is gang (all GPUs or none) and topology-aware: one node (best fit) when it can,
required when ``same_node``; otherwise one NVLink domain, otherwise any nodes. A free GPU that
is booked in the future is used (backfill) only when the job's ``max_runtime`` ends before the
booking starts.

Free GPUs are indexed per model by node and per node by free count, so one placement costs
O(GPUs per node) rather than O(GPUs); a failed shape (model, count, same_node) is remembered
for the rest of the cycle because free capacity only shrinks within a cycle.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass

from apps.jobs.scheduler.state import (
    ClusterState,
    Decision,
    GpuInfo,
    Pending,
    PendingReason,
    Placement,
    Preemption,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
)

POLICIES = ("fairshare", "fifo", "sjf")
UNLIMITED = 10**9


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs of the scheduler; the defaults suit the live portal."""

    # Recent GPU-seconds lose half their weight in the fair share after this long.
    usage_half_life_seconds: float = 7 * 24 * 3600.0
    # Each hour a job waits lowers its team's effective share by this much (aging).
    aging_per_hour: float = 0.05
    preemption_enabled: bool = True
    # Time a preempted job gets to stop (SIGTERM -> SIGKILL); used for estimates only.
    grace_seconds: float = 30.0
    # Teams without a quota row for a model may use it up to this many GPUs, with no guarantee.
    default_limit: int = UNLIMITED
    # Write a message and an estimated start for every pending job. The replayer turns it off.
    explain: bool = True


def decay_usage(
    usage: dict[str, float],
    running: list[RunningJob],
    *,
    elapsed: float,
    half_life: float,
) -> dict[str, float]:
    """Usage after ``elapsed`` seconds: old GPU-seconds decay, running jobs add theirs."""
    factor = 0.5 ** (elapsed / half_life) if half_life > 0 else 0.0
    out = {team: value * factor for team, value in usage.items()}
    for job in running:
        out[job.team] = out.get(job.team, 0.0) + len(job.gpu_ids) * elapsed
    return out


def _pretty_model(model: str | None) -> str:
    return model if model else "GPUs of any model"


def _gpus_phrase(count: int, model: str | None) -> str:
    noun = "GPU" if count == 1 else "GPUs"
    return f"{count} free {model} {noun}" if model else f"{count} free {noun}"


class _Quotas:
    """Quota rows by (team, model); a row with model None covers every model of the team."""

    def __init__(self, quotas: list[TeamQuota], default_limit: int) -> None:
        self.rows: dict[tuple[str, str | None], TeamQuota] = {(q.team, q.model): q for q in quotas}
        self.default_limit = default_limit
        self.used: dict[tuple[str, str | None], int] = defaultdict(int)
        self.weight: dict[str, float] = defaultdict(float)
        for q in quotas:
            self.weight[q.team] += q.guaranteed

    def key(self, team: str, model: str) -> tuple[str, str | None]:
        if (team, model) in self.rows:
            return (team, model)
        return (team, None)

    def guaranteed(self, key: tuple[str, str | None]) -> int:
        row = self.rows.get(key)
        return row.guaranteed if row else 0

    def limit(self, key: tuple[str, str | None]) -> int:
        row = self.rows.get(key)
        return row.limit if row else self.default_limit


class _Pool:
    """Free GPUs per model and node, with a per-model index of nodes by free count."""

    def __init__(self, gpus: list[GpuInfo], busy: set[int], future_booking: dict[int, float]):
        self.info: dict[int, GpuInfo] = {g.gpu_id: g for g in gpus}
        # clean[model][node] -> list of free GPU ids with no future booking
        self.clean: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        # booked[model][node] -> list of (booking start, gpu id) free now but booked later
        self.booked: dict[str, dict[str, list[tuple[float, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self.by_count: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
        self.total: dict[str, int] = defaultdict(int)
        self.capacity: dict[str, int] = defaultdict(int)
        self.node_domain_order: dict[str, list[str]] = {}
        for g in sorted(gpus, key=lambda g: (g.node, g.gpu_id)):
            self.capacity[g.model] += 1
            if g.gpu_id in busy:
                continue
            if g.gpu_id in future_booking:
                self.booked[g.model][g.node].append((future_booking[g.gpu_id], g.gpu_id))
            else:
                self.clean[g.model][g.node].append(g.gpu_id)
                self.total[g.model] += 1
        for model, nodes in self.clean.items():
            for node, ids in nodes.items():
                self.by_count[model][len(ids)].add(node)
        per_node: dict[str, int] = defaultdict(int)
        for g in gpus:
            per_node[g.node] += 1
        self.max_per_node = max(per_node.values(), default=0)
        self.models = sorted(self.capacity)

    def snapshot_totals(self) -> dict[str, int]:
        return dict(self.total)

    def take(self, model: str, picks: list[int]) -> None:
        by_node: dict[str, list[int]] = defaultdict(list)
        for gid in picks:
            by_node[self.info[gid].node].append(gid)
        for node, ids in by_node.items():
            clean = self.clean[model].get(node, [])
            drop = set(ids)
            before = len(clean)
            remaining = [g for g in clean if g not in drop]
            removed_clean = before - len(remaining)
            if removed_clean:
                self.by_count[model][before].discard(node)
                self.clean[model][node] = remaining
                if remaining:
                    self.by_count[model][len(remaining)].add(node)
                self.total[model] -= removed_clean
            booked = self.booked[model].get(node)
            if booked and len(drop) > removed_clean:
                self.booked[model][node] = [b for b in booked if b[1] not in drop]

    def _pick_on_node(self, ids: list[int], count: int) -> list[int]:
        """``count`` GPUs of one node, from one NVLink domain when one has enough."""
        if len(ids) == count:
            return list(ids)
        domains: dict[str | None, list[int]] = defaultdict(list)
        for gid in ids:
            domains[self.info[gid].nvlink_domain].append(gid)
        if len(domains) > 1:
            fitting = [d for d in domains.values() if len(d) >= count]
            if fitting:
                return min(fitting, key=len)[:count]
        return ids[:count]

    def _usable_booked(self, model: str, node: str, deadline: float) -> list[int]:
        return [gid for start, gid in self.booked[model].get(node, ()) if start >= deadline]

    def find(self, model: str, count: int, same_node: bool, deadline: float) -> list[int] | None:
        """GPUs for a gang of ``count`` on ``model``, or None. Does not take them."""
        has_booked = bool(self.booked.get(model))
        # 1. one node, best fit (fewest free GPUs that still fit) to keep big holes for big jobs.
        for c in range(count, self.max_per_node + 1):
            nodes = self.by_count[model].get(c)
            if nodes:
                node = min(nodes)
                return self._pick_on_node(self.clean[model][node], count)
        if has_booked:
            best: list[int] | None = None
            for node in set(self.clean[model]) | set(self.booked[model]):
                ids = self.clean[model].get(node, []) + self._usable_booked(model, node, deadline)
                if len(ids) >= count and (best is None or len(ids) < len(best)):
                    best = ids
            if best is not None:
                return self._pick_on_node(best, count)
        if same_node:
            return None
        # 2. several nodes: one NVLink domain if possible, then any, biggest holes first.
        free_total = self.total[model]
        per_node: dict[str, list[int]] = {
            node: list(ids) for node, ids in self.clean[model].items() if ids
        }
        if has_booked:
            for node in self.booked[model]:
                extra = self._usable_booked(model, node, deadline)
                if extra:
                    per_node.setdefault(node, []).extend(extra)
                    free_total += len(extra)
        if free_total < count:
            return None
        domains: dict[str | None, list[str]] = defaultdict(list)
        for node, ids in per_node.items():
            domains[self.info[ids[0]].nvlink_domain].append(node)
        for domain, nodes in sorted(domains.items(), key=lambda kv: str(kv[0])):
            if domain is None:
                continue
            ids = [g for n in nodes for g in per_node[n] if self.info[g].nvlink_domain == domain]
            if len(ids) >= count:
                return ids[:count]
        picks: list[int] = []
        for node in sorted(per_node, key=lambda n: (-len(per_node[n]), n)):
            picks.extend(per_node[node][: count - len(picks)])
            if len(picks) == count:
                return picks
        return None

    def fits_ignoring_bookings(self, model: str, count: int, same_node: bool) -> bool:
        nodes = set(self.clean[model]) | set(self.booked.get(model, {}))
        sizes = [
            len(self.clean[model].get(n, [])) + len(self.booked.get(model, {}).get(n, []))
            for n in nodes
        ]
        if same_node:
            return any(s >= count for s in sizes)
        return sum(sizes) >= count


def _order_key(policy: str):
    if policy == "sjf":
        return lambda j: (j.max_runtime, j.submitted_at, j.job_id)
    return lambda j: (j.submitted_at, j.job_id)


class _Cycle:
    def __init__(self, state: ClusterState, policy: str, config: SchedulerConfig) -> None:
        self.state = state
        self.policy = policy
        self.config = config
        self.now = state.now
        self.decision = Decision()
        self.quotas = _Quotas(state.quotas, config.default_limit)
        self.gpu_model = {g.gpu_id: g.model for g in state.gpus}
        busy: set[int] = set()
        self.team_gpus: dict[str, int] = defaultdict(int)
        for r in state.running:
            busy.update(r.gpu_ids)
            self.team_gpus[r.team] += len(r.gpu_ids)
            if r.reservation_id is None:
                self.quotas.used[self.quotas.key(r.team, r.model)] += len(r.gpu_ids)
        # Active bookings hold their GPUs for their reservation; later ones allow backfill.
        self.active: dict[int, list[int]] = defaultdict(list)
        active_gpus: set[int] = set()
        future: dict[int, float] = {}
        for b in state.bookings:
            if b.end <= self.now:
                continue
            if b.start <= self.now:
                self.active[b.reservation_id].append(b.gpu_id)
                active_gpus.add(b.gpu_id)
            else:
                future[b.gpu_id] = min(b.start, future.get(b.gpu_id, math.inf))
        self.busy = busy
        self.pool = _Pool(state.gpus, busy | active_gpus, future)
        self.initial_totals = self.pool.snapshot_totals()
        self.failed_shapes: dict[tuple[str, int, bool], float] = {}
        self.placed_by_team: dict[str, int] = defaultdict(int)
        self.placed_count = 0
        self.unplaced: dict[int, tuple[QueuedJob, PendingReason, str]] = {}
        self._release_times = self._build_release_times()

    # -- helpers -------------------------------------------------------------------------

    def _models_for(self, job: QueuedJob) -> list[str]:
        if job.gpu_model is not None:
            return [job.gpu_model] if job.gpu_model in self.pool.capacity else []
        return sorted(self.pool.models, key=lambda m: -self.pool.total.get(m, 0))

    def _try_place(self, job: QueuedJob, *, within_guarantee: bool) -> bool | PendingReason:
        """Place ``job`` if it fits; returns True, or why it did not."""
        deadline = self.now + job.max_runtime
        reason: PendingReason = PendingReason.NO_CAPACITY
        for model in self._models_for(job):
            key = self.quotas.key(job.team, model)
            used = self.quotas.used[key]
            if within_guarantee:
                if used + job.gpu_count > self.quotas.guaranteed(key):
                    reason = PendingReason.QUOTA_REACHED
                    continue
            elif used + job.gpu_count > self.quotas.limit(key):
                reason = PendingReason.QUOTA_REACHED
                continue
            shape = (model, job.gpu_count, job.same_node)
            if self.failed_shapes.get(shape, math.inf) <= job.max_runtime:
                reason = PendingReason.NO_CAPACITY
                continue
            picks = self.pool.find(model, job.gpu_count, job.same_node, deadline)
            if picks is None:
                prev = self.failed_shapes.get(shape, math.inf)
                self.failed_shapes[shape] = min(prev, job.max_runtime)
                reason = PendingReason.NO_CAPACITY
                continue
            self.pool.take(model, picks)
            over = not within_guarantee and (
                used + job.gpu_count > self.quotas.guaranteed(key)
                or job.priority_class == PriorityClass.PREEMPTIBLE
            )
            self.quotas.used[key] += job.gpu_count
            self.team_gpus[job.team] += job.gpu_count
            self.placed_by_team[job.team] += 1
            self.placed_count += 1
            self.decision.placements.append(Placement(job.job_id, tuple(picks), over))
            return True
        return reason

    def _no_capacity_message(self, job: QueuedJob) -> tuple[PendingReason, str]:
        models = self._models_for(job)
        if not models:
            return (
                PendingReason.NO_CAPACITY,
                f"No schedulable {_pretty_model(job.gpu_model)} GPUs in the fleet.",
            )
        model = job.gpu_model
        if (
            any(
                self.initial_totals.get(m, 0) >= job.gpu_count
                and self.pool.total.get(m, 0) < job.gpu_count
                for m in models
            )
            and self.policy == "fairshare"
        ):
            ahead = self.placed_count - self.placed_by_team[job.team]
            if ahead:
                jobs = "job" if ahead == 1 else "jobs"
                verb = "comes" if ahead == 1 else "come"
                return (
                    PendingReason.FAIR_SHARE,
                    f"Waiting behind fair share: {ahead} {jobs} of other teams {verb} first.",
                )
        if any(self.pool.fits_ignoring_bookings(m, job.gpu_count, job.same_node) for m in models):
            return (
                PendingReason.RESERVED,
                f"Free {_pretty_model(model)} GPUs are booked by other teams before this job "
                "would end.",
            )
        if job.same_node and job.gpu_count > 1:
            return (
                PendingReason.NO_CAPACITY,
                f"No node has {_gpus_phrase(job.gpu_count, model)}.",
            )
        free = sum(self.pool.total.get(m, 0) for m in models)
        return (
            PendingReason.NO_CAPACITY,
            f"Only {free} {_pretty_model(model)} GPUs are free; the job needs {job.gpu_count}.",
        )

    def _quota_message(self, job: QueuedJob, *, guaranteed_only: bool) -> str:
        model = job.gpu_model or (self.pool.models[0] if self.pool.models else None)
        key = self.quotas.key(job.team, model) if model else (job.team, None)
        if guaranteed_only:
            n = self.quotas.guaranteed(key)
            return f"Team {job.team} is using all {n} guaranteed {_pretty_model(model)} GPUs."
        n = self.quotas.limit(key)
        return f"Team {job.team} is at its quota of {n} {_pretty_model(model)} GPUs."

    def _build_release_times(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = defaultdict(list)
        for r in self.state.running:
            out[r.model].extend([r.started_at + r.max_runtime] * len(r.gpu_ids))
        for times in out.values():
            times.sort()
        return out

    def _estimate(self, job: QueuedJob) -> float | None:
        """When enough GPUs of the model will be free if running jobs use all their time."""
        best: float | None = None
        for model in self._models_for(job):
            if self.pool.capacity[model] < job.gpu_count:
                continue
            free = self.pool.total.get(model, 0)
            if free >= job.gpu_count:
                return self.now
            times = self._release_times.get(model, [])
            idx = job.gpu_count - free - 1
            if idx < len(times):
                t = max(self.now, times[idx])
                best = t if best is None else min(best, t)
        return best

    def _pend(self, job: QueuedJob, reason: PendingReason, message: str) -> None:
        self.unplaced[job.job_id] = (job, reason, message)

    def _pend_unplaced(self, job: QueuedJob, result: PendingReason, *, guaranteed_only: bool):
        if not self.config.explain:
            self.unplaced[job.job_id] = (job, result, "")
        elif result == PendingReason.QUOTA_REACHED:
            self._pend(job, result, self._quota_message(job, guaranteed_only=guaranteed_only))
        else:
            self._pend(job, *self._no_capacity_message(job))

    def _exhausted(self) -> bool:
        """No free GPU left at all (booked ones included): every later job must wait."""
        return not any(self.pool.total.values()) and not any(
            ids for nodes in self.pool.booked.values() for ids in nodes.values()
        )

    # -- phases --------------------------------------------------------------------------

    def reservations(self, jobs: list[QueuedJob]) -> list[QueuedJob]:
        rest = []
        for job in jobs:
            if job.reservation_id is None:
                rest.append(job)
                continue
            gpus = [g for g in self.active.get(job.reservation_id, []) if g not in self.busy]
            if job.reservation_id not in self.active:
                self._pend(
                    job,
                    PendingReason.RESERVATION_NOT_ACTIVE,
                    "Its reservation is not active now; the job runs only inside it.",
                )
                continue
            models = [m for m in {self.gpu_model[g] for g in gpus} if job.gpu_model in (None, m)]
            placed = False
            for model in sorted(models):
                ids = [g for g in gpus if self.gpu_model[g] == model]
                if len(ids) >= job.gpu_count:
                    picks = ids[: job.gpu_count]
                    if job.same_node:
                        by_node: dict[str, list[int]] = defaultdict(list)
                        for g in ids:
                            by_node[self.pool.info[g].node].append(g)
                        fitting = [v for v in by_node.values() if len(v) >= job.gpu_count]
                        if not fitting:
                            continue
                        picks = min(fitting, key=len)[: job.gpu_count]
                    self.busy.update(picks)
                    self.decision.placements.append(Placement(job.job_id, tuple(picks), False))
                    placed = True
                    break
            if not placed:
                self._pend(
                    job,
                    PendingReason.NO_CAPACITY,
                    f"Its reservation has no {_gpus_phrase(job.gpu_count, job.gpu_model)} "
                    "left now.",
                )
        return rest

    def baseline(self, jobs: list[QueuedJob]) -> None:
        exhausted = False
        for job in sorted(jobs, key=_order_key(self.policy)):
            if exhausted:
                self._pend_unplaced(job, PendingReason.NO_CAPACITY, guaranteed_only=False)
                continue
            result = self._try_place(job, within_guarantee=False)
            if result is True:
                exhausted = self._exhausted()
                continue
            self._pend_unplaced(job, result, guaranteed_only=False)

    def fairshare(self, jobs: list[QueuedJob]) -> None:
        order = _order_key("fifo")
        jobs = sorted(jobs, key=order)
        spare: list[QueuedJob] = []
        # Phase 1: guaranteed share, oldest first.
        exhausted = self._exhausted()
        for job in jobs:
            if job.priority_class == PriorityClass.PREEMPTIBLE:
                spare.append(job)
                continue
            if exhausted:
                result: bool | PendingReason = PendingReason.NO_CAPACITY
            else:
                result = self._try_place(job, within_guarantee=True)
                exhausted = result is True and self._exhausted()
            if result is True:
                continue
            if job.priority_class == PriorityClass.GUARANTEED:
                # Guaranteed jobs never run above the guarantee; when within it but short of
                # free GPUs they are candidates for preemption below.
                self._pend_unplaced(job, result, guaranteed_only=True)
                continue
            spare.append(job)
        # Phase 2: weighted fair share of the spare capacity.
        by_team: dict[str, list[QueuedJob]] = defaultdict(list)
        for job in spare:
            by_team[job.team].append(job)
        total_capacity = max(1, sum(self.pool.capacity.values()))
        half_life = max(1.0, self.config.usage_half_life_seconds)
        aging = self.config.aging_per_hour / 3600.0

        def share(team: str, next_job: QueuedJob) -> float:
            weight = max(1.0, self.quotas.weight.get(team, 0.0))
            history = self.state.usage.get(team, 0.0) / (total_capacity * half_life)
            now_share = self.team_gpus[team] / total_capacity
            return (history + now_share) / weight - aging * (self.now - next_job.submitted_at)

        heap: list[tuple[float, str, int]] = []
        for team, team_jobs in by_team.items():
            heapq.heappush(heap, (share(team, team_jobs[0]), team, 0))
        exhausted = self._exhausted()
        while heap:
            _, team, idx = heapq.heappop(heap)
            team_jobs = by_team[team]
            if exhausted:
                for job in team_jobs[idx:]:
                    self._pend_unplaced(job, PendingReason.NO_CAPACITY, guaranteed_only=False)
                continue
            job = team_jobs[idx]
            result = self._try_place(job, within_guarantee=False)
            if result is True:
                exhausted = self._exhausted()
            else:
                self._pend_unplaced(job, result, guaranteed_only=False)
            if idx + 1 < len(team_jobs):
                heapq.heappush(heap, (share(team, team_jobs[idx + 1]), team, idx + 1))

    def preempt(self) -> None:
        """Stop over-quota work of other teams, newest first, for jobs within a guarantee."""
        victims = sorted(
            (
                r
                for r in self.state.running
                if r.reservation_id is None
                and (r.over_quota or r.priority_class == PriorityClass.PREEMPTIBLE)
                and r.priority_class != PriorityClass.GUARANTEED
            ),
            key=lambda r: (-r.started_at, -r.job_id),
        )
        if not victims:
            return
        taken: set[int] = set()
        waiting = sorted(
            (
                job
                for job, reason, _ in self.unplaced.values()
                if job.reservation_id is None
                and job.priority_class != PriorityClass.PREEMPTIBLE
                and reason
                in (PendingReason.NO_CAPACITY, PendingReason.FAIR_SHARE, PendingReason.RESERVED)
            ),
            key=_order_key("fifo"),
        )
        for job in waiting:
            for model in self._models_for(job):
                key = self.quotas.key(job.team, model)
                if self.quotas.used[key] + job.gpu_count > self.quotas.guaranteed(key):
                    continue
                chosen = self._victims_for(job, model, victims, taken)
                if chosen is None:
                    continue
                for v in chosen:
                    taken.add(v.job_id)
                    self.decision.preemptions.append(Preemption(v.job_id, job.job_id))
                # Count the GPUs toward the waiting job's guarantee so later jobs see them.
                self.quotas.used[key] += job.gpu_count
                self.unplaced[job.job_id] = (
                    job,
                    PendingReason.WAITING_FOR_PREEMPTION,
                    f"Stopping {len(chosen)} over-quota job{'s' if len(chosen) != 1 else ''} "
                    "of other teams to free its guaranteed GPUs.",
                )
                break

    def _victims_for(
        self, job: QueuedJob, model: str, victims: list[RunningJob], taken: set[int]
    ) -> list[RunningJob] | None:
        free_by_node: dict[str, int] = defaultdict(int)
        for node, ids in self.pool.clean[model].items():
            free_by_node[node] += len(ids)
        free_total = sum(free_by_node.values())
        chosen: list[RunningJob] = []
        for v in victims:
            if v.job_id in taken or v.team == job.team or v.model != model:
                continue
            chosen.append(v)
            for gid in v.gpu_ids:
                free_by_node[self.pool.info[gid].node] += 1
            free_total += len(v.gpu_ids)
            if job.same_node:
                if max(free_by_node.values()) >= job.gpu_count:
                    return chosen
            elif free_total >= job.gpu_count:
                return chosen
        return None

    def finish(self) -> Decision:
        explain = self.config.explain
        for job, reason, message in self.unplaced.values():
            estimate = self._estimate(job) if explain else None
            self.decision.pending.append(Pending(job.job_id, reason, message, estimate))
        self.decision.pending.sort(key=lambda p: p.job_id)
        return self.decision


def schedule(
    state: ClusterState, policy: str = "fairshare", config: SchedulerConfig | None = None
) -> Decision:
    """Decide which queued jobs start now, which running jobs to preempt, and why others wait.

    Pure: reads ``state`` only and returns a ``Decision``; every queued job ends up in exactly
    one of ``placements`` or ``pending``.
    """
    if policy not in POLICIES:
        raise ValueError(f"Unknown policy {policy!r}; choose one of {', '.join(POLICIES)}.")
    config = config or SchedulerConfig()
    cycle = _Cycle(state, policy, config)
    queued = cycle.reservations(list(state.queued))
    if policy == "fairshare":
        cycle.fairshare(queued)
        if config.preemption_enabled:
            cycle.preempt()
    else:
        cycle.baseline(queued)
    return cycle.finish()


__all__ = ["POLICIES", "SchedulerConfig", "decay_usage", "schedule"]
