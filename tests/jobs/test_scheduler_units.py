"""The engine with organisation units: the spare pool lends the idle guarantee nearest first
(sibling teams, then the parent unit's, then the fleet), a reclaim takes borrowers from outside
the reclaiming team's unit first, and a unit's limit caps its teams' borrowing together."""

from __future__ import annotations

from apps.jobs.scheduler import schedule
from apps.jobs.scheduler.state import (
    ClusterState,
    GpuInfo,
    PendingReason,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
)
from apps.teams.org_tree import OrgTree
from apps.teams.quota_rule import UnitQuotaRow

NOW = 1_000_000.0
A = "A100"

# org > lab > {owner, zeta}; org > other > {alpha}. "alpha" sorts first and, below, has the
# older job: without units it comes first in every order.
TREE = OrgTree(
    {"org": None, "lab": "org", "other": "org"},
    {"owner": "lab", "zeta": "lab", "alpha": "other"},
)
QUOTAS = [TeamQuota("owner", A, 2, 4), TeamQuota("zeta", A, 0, 4), TeamQuota("alpha", A, 0, 4)]


def gpus(n: int) -> list[GpuInfo]:
    return [GpuInfo(i, "n0", A, "nvl-0") for i in range(n)]


def queued(job_id, team, count=1, age=0.0, runtime=3600.0) -> QueuedJob:
    return QueuedJob(job_id, team, A, count, runtime, NOW - age)


def borrowing(job_id, team, gpu_ids, started) -> RunningJob:
    return RunningJob(
        job_id, team, A, tuple(gpu_ids), started, 36_000.0, PriorityClass.OVER_QUOTA, True
    )


def state(queue, run=(), *, tree=TREE, unit_quotas=()) -> ClusterState:
    return ClusterState(
        NOW,
        gpus(4),
        list(queue),
        list(run),
        quotas=QUOTAS,
        unit_quotas=list(unit_quotas),
        org_tree=tree,
    )


def placed(decision) -> set[int]:
    return {p.job_id for p in decision.placements}


def test_the_spare_gpu_goes_to_the_sibling_of_the_idle_guarantee_first():
    run = [borrowing(10, "alpha", [0], NOW - 60), borrowing(11, "zeta", [1], NOW - 60)]
    waiting = [queued(1, "alpha", count=2, age=600), queued(2, "zeta", count=2)]
    assert placed(schedule(state(waiting, run, tree=None))) == {1}  # flat: the older job
    assert placed(schedule(state(waiting, run))) == {2}  # zeta borrows owner's idle guarantee


def test_without_idle_guarantee_in_the_unit_the_fleet_order_holds():
    # owner uses its guarantee: nothing idle in lab, both borrow from the fleet
    run = [RunningJob(10, "owner", A, (0, 1), NOW - 60, 36_000.0, PriorityClass.OVER_QUOTA, False)]
    waiting = [queued(1, "alpha", count=2, age=600), queued(2, "zeta", count=2)]
    assert placed(schedule(state(waiting, run))) == {1}


def test_a_reclaim_takes_the_borrower_outside_the_unit_first():
    # zeta's job loses less GPU-time (younger): the cost order alone would stop it
    run = [borrowing(10, "alpha", [0, 1], NOW - 7200), borrowing(11, "zeta", [2, 3], NOW - 3600)]
    waiting = [queued(1, "owner", count=2, runtime=36_000.0)]  # both within the loss budget
    flat = schedule(state(waiting, run, tree=None))
    assert [p.job_id for p in flat.preemptions] == [11]
    nested = schedule(state(waiting, run))
    assert [p.job_id for p in nested.preemptions] == [10]
    assert [p.job_id for p in nested.after_preemption] == [1]


def test_a_unit_limit_caps_its_teams_borrowing_together():
    unit_quotas = [UnitQuotaRow("lab", A, 2, 3)]
    waiting = [queued(1, "zeta", count=2, age=60), queued(2, "zeta", count=2)]
    decision = schedule(state(waiting, unit_quotas=unit_quotas))
    assert placed(decision) == {1}  # lab may hold 3 GPUs: not 4, though 2 are free
    assert placed(schedule(state(waiting))) == {1, 2}  # without the unit row
    # owner's guarantee is never capped by the unit: within it, it starts beside zeta's 3
    run = [borrowing(10, "zeta", [0, 1, 2], NOW - 60)]
    decision = schedule(state([queued(3, "owner", count=1)], run, unit_quotas=unit_quotas))
    assert placed(decision) == {3}
    decision = schedule(state([queued(4, "zeta", count=1)], run, unit_quotas=unit_quotas))
    assert placed(decision) == set()


def test_one_root_unit_and_no_unit_rows_decide_as_flat_teams():
    root = OrgTree({"org": None}, {t.team: "org" for t in QUOTAS})
    run = [borrowing(10, "alpha", [0, 1], NOW - 7200), borrowing(11, "zeta", [2, 3], NOW - 3600)]
    for waiting in (
        [queued(1, "owner", count=2, runtime=36_000.0)],
        [queued(1, "alpha"), queued(2, "zeta")],
    ):
        flat = schedule(state(waiting, run, tree=None))
        nested = schedule(state(waiting, run, tree=root))
        assert flat == nested


def test_a_siblings_booking_ahead_counts_in_the_units_limit_over_a_jobs_run():
    from apps.jobs.scheduler.state import Booking

    unit_quotas = [UnitQuotaRow("lab", A, 2, 3)]
    # zeta books 2 GPUs from in 30 minutes: lab holds 2 then
    booked = [Booking(7, "zeta", g, NOW + 1800, NOW + 7200) for g in (2, 3)]
    # owner's 3 GPUs borrow 1 beyond its guarantee: lab would hold 5 when the booking starts
    long_job = QueuedJob(1, "owner", A, 3, 3600.0, NOW)
    short_job = QueuedJob(2, "owner", A, 3, 600.0, NOW)  # ends before the booking starts
    for job, placed_ids in ((long_job, set()), (short_job, {2})):
        state = ClusterState(
            NOW, gpus(8), [job], [], booked, QUOTAS, unit_quotas=unit_quotas, org_tree=TREE
        )
        assert placed(schedule(state)) == placed_ids
    # without the unit row the long job starts
    state = ClusterState(NOW, gpus(8), [long_job], [], booked, QUOTAS, org_tree=TREE)
    assert placed(schedule(state)) == {1}


def test_a_job_waiting_for_its_units_limit_says_so():
    unit_quotas = [UnitQuotaRow("lab", A, 2, 3)]
    run = [borrowing(10, "zeta", [0, 1, 2], NOW - 60)]
    decision = schedule(state([queued(4, "zeta", count=1)], run, unit_quotas=unit_quotas))
    (pending,) = decision.pending
    assert pending.reason == PendingReason.QUOTA_REACHED
    assert pending.message == (
        "The teams of unit lab hold 3 of its quota of 3 A100 GPUs together; the job needs 1 "
        "beyond team zeta's guarantee."
    )


def test_borrowing_goes_up_to_the_parent_units_idle_guarantee_before_the_fleet():
    # org > dept > {group > {a1, a2}, b1}; org > other > {x}. Only b1 has idle guarantee: a1
    # borrows it one level up (dept), x only from the fleet.
    tree = OrgTree(
        {"org": None, "dept": "org", "group": "dept", "other": "org"},
        {"a1": "group", "a2": "group", "b1": "dept", "x": "other"},
    )
    quotas = [TeamQuota(t, A, 0, 4) for t in ("a1", "a2", "x")] + [TeamQuota("b1", A, 2, 4)]
    run = [borrowing(10, "a1", [0], NOW - 60), borrowing(11, "x", [1], NOW - 60)]
    waiting = [queued(1, "x", count=2, age=600), queued(2, "a1", count=2)]

    def decide(org_tree):
        return placed(
            schedule(ClusterState(NOW, gpus(4), waiting, run, quotas=quotas, org_tree=org_tree))
        )

    assert decide(None) == {1}
    assert decide(tree) == {2}
