"""The scheduler's policies and knobs, and the order in which a policy takes waiting jobs."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from apps.jobs.scheduler.modes import GUARANTEE, SPARE
from apps.jobs.scheduler.state import (
    PriorityClass,
    QueuedJob,
    RunningJob,
)

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
    # the GPUs a guarantee needs back (one that resumes from its checkpoint, losing nothing,
    # as soon as the loss budget is set aside, after the waiting job's patience).
    max_preemptions_per_job: int = 2
    # Victims throwing away at most this times what the waiting job asked for (GPUs x max
    # runtime) come first: a notebook stops a day-old 64-GPU training run only when nothing
    # cheaper frees its guaranteed GPUs.
    preempt_max_lost_ratio: float = 0.5
    # A job within its guarantee waits this long for GPUs to come back by themselves before
    # victims outside the bounds above are stopped for it (within them: at once).
    reclaim_patience_seconds: float = 600.0
    # Past that patience a multi-node gang that restarts from scratch still yields only after
    # this long, when no other victims free the GPUs: a gang lent many nodes may have run
    # for days, and until then the nodes the job drains (``_drain``) may free by themselves.
    gang_reclaim_patience_seconds: float = 1800.0
    # A job a reclaim stopped that would lose its work again restarts on borrowed GPUs only
    # when its runtime limit is at most this; a longer one waits for room within its team's
    # guarantee, unless it is larger than the guarantee. Borrowing again, a day-long job is
    # likely stopped again, later and at a higher loss: on the Alibaba pod list on 3 x 8 GPUs,
    # where pods that run for months were stopped up to seven times each, GPU-hours lost fell
    # from 18 % to 12 % and preemptions from 0.15 to 0.07 per job, at a shorter average JCT.
    reborrow_max_runtime_seconds: float = 24 * 3600.0
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
    """The order in which ``policy`` takes waiting jobs: under ``fairshare`` least attained
    service first in Tiresias' discretized queues (``attained_level``), then each job's turn
    in its team's queue (per-user fair share; guarantees and spare capacity are served in
    this order within each team), under ``sjf`` shortest ``max_runtime`` first, else oldest
    first. The queue page lists jobs by this key too."""
    return _order_key(policy)


def attained_level(attained: float) -> int:
    """Tiresias' queue of a job that ran ``attained`` GPU-seconds in earlier attempts: 0 for
    a job that never ran (or ran less than the first bound of ``TIRESIAS_BOUNDS``), one more
    per bound passed. Without knowing durations, a job that has run long already is the one
    likely to run long again: a preempted job that lost hours of work goes behind its team's
    fresh work instead of taking borrowed GPUs back at once and being preempted again."""
    return bisect.bisect_right(TIRESIAS_BOUNDS, attained)


def _order_key(policy: str):
    if policy == "sjf":
        return lambda j: (j.max_runtime, j.submitted_at, j.job_id)
    if policy == "fairshare":  # least attained service, then the job's turn (per-user share)
        return lambda j: (attained_level(j.attained), j.queued_since, j.job_id)
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
