"""What the scheduler reads and what it decides: plain dataclasses, no Django.

The live dispatcher builds a ``ClusterState`` from the database, the trace replayer builds one
from a CSV and a simulated clock, and both hand it to the same ``schedule()``. Times are epoch
seconds (floats) so the replayer can run in simulated time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from apps.teams.org_tree import OrgTree
from apps.teams.quota_rule import QuotaRow, UnitQuotaRow


class PriorityClass(StrEnum):
    GUARANTEED = "guaranteed"  # runs only within the team's guaranteed GPUs; never preempted
    OVER_QUOTA = "over_quota"  # may use spare capacity up to the quota limit; preemptible
    PREEMPTIBLE = "preemptible"  # scavenger work; first to be preempted


class PendingReason(StrEnum):
    QUOTA_REACHED = "quota_reached"  # the team is at its limit for this model
    # larger than the team's limit (or, in the Guaranteed class, its guarantee): it cannot
    # start until the quota changes, so it has no estimated start
    BEYOND_QUOTA = "beyond_quota"
    NO_CAPACITY = "no_capacity"  # not enough free GPUs (of the model / on one node)
    FAIR_SHARE = "fair_share"  # capacity exists but other teams come first by fair share
    RESERVED = "reserved"  # free GPUs are booked by other teams before the job could end
    RESERVATION_NOT_ACTIVE = "reservation_not_active"  # its reservation has not started / ended
    WAITING_FOR_PREEMPTION = "waiting_for_preemption"  # preempted jobs are being stopped for it
    # within its guarantee: over-quota jobs of other teams stop for it once they may
    RECLAIMING_GUARANTEE = "reclaiming_guarantee"
    # not enough free GPUs now, but a node powering up brings enough
    POWERING_UP = "powering_up"
    # its team's first job within the guarantee waits for a reclaim and needs the room left
    TEAM_JOB_FIRST = "team_job_first"
    # stopped by a reclaim before, a long job that would lose its work waits for room within
    # its team's guarantee instead of borrowing again (``Engine._may_borrow``)
    RESTARTS_WITHIN_GUARANTEE = "restarts_within_guarantee"


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """A schedulable GPU (healthy, active, on an up node)."""

    gpu_id: int
    node: str
    model: str
    nvlink_domain: str | None = None
    rack: str | None = None  # the node's ``labels["rack"]``: gangs prefer nodes of one rack


@dataclass(frozen=True, slots=True)
class ResumingNode:
    """A node powering up (power saving): its GPUs take work from ``ready_at`` on."""

    node: str
    model: str
    gpus: int
    ready_at: float


@dataclass(frozen=True, slots=True)
class Booking:
    """A reservation's hold on one GPU over [start, end)."""

    reservation_id: int
    team: str
    gpu_id: int
    start: float
    end: float
    # The GPU's model (the booking counts against the team's quota even when the GPU has left
    # the schedulable pool); None: the model of the GPU in the pool.
    model: str | None = None


@dataclass(frozen=True, slots=True)
class RunningJob:
    job_id: int
    team: str
    model: str
    gpu_ids: tuple[int, ...]
    started_at: float
    max_runtime: float  # seconds; the job is killed at started_at + max_runtime
    priority_class: PriorityClass
    over_quota: bool  # placed above the team's guarantee (preemptible)
    reservation_id: int | None = None
    checkpointable: bool = False  # resumes with its progress after a preemption
    preemptions: int = 0  # times it was preempted before; protected at the configured cap


@dataclass(frozen=True, slots=True)
class QueuedJob:
    job_id: int
    team: str
    gpu_model: str | None  # None: any model
    gpu_count: int
    max_runtime: float  # seconds
    submitted_at: float
    priority_class: PriorityClass = PriorityClass.OVER_QUOTA
    same_node: bool = True
    reservation_id: int | None = None  # run inside this reservation's GPUs only
    checkpointable: bool = False
    preemptions: int = 0
    # GPU-seconds it ran in earlier attempts (the spare pool's "las" order serves least first)
    attained: float = 0.0
    # When its turn comes in its team's queue under fair share (``usage.UserClock``): later
    # than ``submitted_at`` when its user asked for more than the team's guarantee serves by
    # then. None: its submit time.
    turn: float | None = None
    # When its reclaim clock started: the first cycle that found it within its team's unused
    # guarantee (its patience counts from then, not from submission: a job that fits only
    # after its team's own jobs ended must not stop a days-old gang at once). None: not yet;
    # the engine starts it and reports it in ``Decision.reclaim_clocks`` for the caller to
    # carry in the next cycles' queue.
    reclaim_since: float | None = None

    @property
    def queued_since(self) -> float:
        """Its place in its team's queue (fairshare): its turn, else its submit time."""
        return self.submitted_at if self.turn is None else self.turn


# A quota row (model None: any model); what rows mean is the quota rule's (apps.teams.quota_rule).
TeamQuota = QuotaRow


@dataclass(slots=True)
class ClusterState:
    now: float
    gpus: list[GpuInfo]
    queued: list[QueuedJob]
    running: list[RunningJob] = field(default_factory=list)
    bookings: list[Booking] = field(default_factory=list)
    quotas: list[TeamQuota] = field(default_factory=list)
    # Decayed GPU-seconds each team used recently (the fair-share history).
    usage: dict[str, float] = field(default_factory=dict)
    # Nodes powering up: not schedulable yet, but "why pending" and estimates count them.
    resuming: list[ResumingNode] = field(default_factory=list)
    # Organisation units: their quota rows and the tree (teams by name); none: flat teams.
    unit_quotas: list[UnitQuotaRow] = field(default_factory=list)
    org_tree: OrgTree | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    job_id: int
    gpu_ids: tuple[int, ...]
    over_quota: bool


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: int
    for_job_id: int  # the waiting job within its guarantee that needs the GPUs
    # GPU-seconds of work thrown away: the attempt's runtime unless the job is checkpointable.
    gpu_seconds_lost: float = 0.0


@dataclass(frozen=True, slots=True)
class Pending:
    job_id: int
    reason: PendingReason
    message: str  # one sentence for people, e.g. "No node has 8 free H100 GPUs."
    estimated_start: float | None = None


@dataclass(slots=True)
class Decision:
    placements: list[Placement] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    # Jobs that start on the GPUs of this cycle's preemptions once those jobs have stopped
    # (the replayer starts them at once; the live dispatcher places them in the cycle after
    # the victims' nodes confirm the stop, see apps/jobs/dispatch.py).
    after_preemption: list[Placement] = field(default_factory=list)
    # job -> when its reclaim clock started (``QueuedJob.reclaim_since``), for jobs whose
    # clock this cycle started
    reclaim_clocks: dict[int, float] = field(default_factory=dict)
