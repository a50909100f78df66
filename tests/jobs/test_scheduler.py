"""The pure scheduler on small exact cases and hypothesis properties."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.jobs.scheduler import SchedulerConfig, decay_usage, schedule
from apps.jobs.scheduler.state import (
    Booking,
    ClusterState,
    GpuInfo,
    PendingReason,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
)

NOW = 1_000_000.0
H100 = "H100-SXM-80GB"


def fleet(nodes: int = 2, per_node: int = 8, model: str = H100, domains=None) -> list[GpuInfo]:
    out = []
    for n in range(nodes):
        for i in range(per_node):
            dom = domains(n, i) if domains else f"nvl-{n}"
            out.append(GpuInfo(n * per_node + i, f"n{n}", model, dom))
    return out


def job(job_id, team="vision", count=1, *, model=H100, runtime=3600.0, age=0.0, **kw):
    # a job within its guarantee since its submission: its reclaim clock runs from then
    kw.setdefault("reclaim_since", NOW - age)
    return QueuedJob(job_id, team, model, count, runtime, NOW - age, **kw)


def running(job_id, team, gpu_ids, *, started=NOW - 60, runtime=3600.0, over=True, model=H100):
    return RunningJob(
        job_id, team, model, tuple(gpu_ids), started, runtime, PriorityClass.OVER_QUOTA, over
    )


def quotas(g=8, limit=16, teams=("vision", "nlp")):
    return [TeamQuota(t, H100, g, limit) for t in teams]


def placed(decision):
    return {p.job_id: p.gpu_ids for p in decision.placements}


def pending(decision):
    return {p.job_id: p for p in decision.pending}


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError):
        schedule(ClusterState(NOW, [], []), "lottery")


def test_gang_all_or_nothing():
    state = ClusterState(NOW, fleet(1, 4), [job(1, count=6)], quotas=quotas())
    d = schedule(state)
    assert placed(d) == {}
    p = pending(d)[1]
    assert p.reason == PendingReason.NO_CAPACITY
    assert p.message == f"No node has 6 free {H100} GPUs."


def test_same_node_required_and_best_fit():
    gpus = fleet(2, 8)
    # node n0 has 5 free, n1 has 3 free
    run = [running(9, "nlp", [0, 1, 2]), running(8, "nlp", [8, 9, 10, 11, 12])]
    state = ClusterState(NOW, gpus, [job(1, count=3), job(2, count=6)], run, quotas=quotas())
    d = schedule(state)
    assert set(placed(d)[1]) == {13, 14, 15}  # best fit: the node with exactly 3 free
    assert 2 in pending(d)  # 5 free on n0 only; needs 6 on one node


def test_multi_node_job_spans_nodes_when_allowed():
    run = [running(9, "nlp", [0, 1, 2, 3]), running(8, "nlp", [8, 9, 10, 11])]
    state = ClusterState(
        NOW, fleet(2, 8), [job(1, count=6, same_node=False)], run, quotas=quotas(limit=20)
    )
    gpu_ids = placed(schedule(state))[1]
    assert len(gpu_ids) == 6 and len(set(gpu_ids)) == 6


def test_nvlink_domain_preferred_within_node():
    gpus = fleet(1, 8, domains=lambda n, i: "a" if i < 4 else "b")
    run = [running(9, "nlp", [0])]  # domain a has 3 free, b has 4
    state = ClusterState(NOW, gpus, [job(1, count=4)], run, quotas=quotas())
    assert set(placed(schedule(state))[1]) == {4, 5, 6, 7}


def test_nvlink_domain_preferred_across_nodes():
    gpus = fleet(4, 4, domains=lambda n, i: "x" if n in (1, 2) else f"solo-{n}")
    state = ClusterState(NOW, gpus, [job(1, count=8, same_node=False)], quotas=quotas(limit=16))
    picks = placed(schedule(state))[1]
    assert {gpus[g].nvlink_domain for g in picks} == {"x"}


def racked_fleet(racks: dict[int, str | None], per_node: int = 4) -> list[GpuInfo]:
    """Nodes n0.. of ``per_node`` GPUs, each its own NVLink domain, in the given racks."""
    return [
        GpuInfo(n * per_node + i, f"n{n}", H100, f"nvl-{n}", rack)
        for n, rack in racks.items()
        for i in range(per_node)
    ]


def test_gang_prefers_nodes_of_one_rack_when_that_needs_no_more_nodes():
    # n0 and n3 have the most free GPUs but sit in different racks; n1 + n2 share rack r2.
    gpus = racked_fleet({0: "r1", 1: "r2", 2: "r2", 3: "r3"})
    run = [running(9, "nlp", [4]), running(8, "nlp", [8])]  # n1 and n2: 3 free each
    state = ClusterState(NOW, gpus, [job(1, count=6, same_node=False)], run, quotas=quotas())
    picks = placed(schedule(state))[1]
    assert {gpus[g].node for g in picks} == {"n1", "n2"}
    assert {gpus[g].rack for g in picks} == {"r2"}


def test_rack_never_costs_an_extra_node_and_nvlink_domain_comes_first():
    # Rack r2 (n1-n3, 4 free each) would take 3 nodes for 10 GPUs; n0 + n4 take 2.
    gpus = racked_fleet({0: "r1", 1: "r2", 2: "r2", 3: "r2", 4: "r3"}, per_node=8)
    run = [running(10 + n, "nlp", range(8 * n, 8 * n + 4)) for n in (1, 2, 3)]
    state = ClusterState(
        NOW, gpus, [job(1, count=10, same_node=False)], run, quotas=quotas(limit=24)
    )
    assert {gpus[g].node for g in placed(schedule(state))[1]} == {"n0", "n4"}
    # One NVLink domain spanning n2 + n3 beats the rack r2 (n1 + n2).
    gpus = [
        GpuInfo(g.gpu_id, g.node, g.model, "x" if g.node in ("n2", "n3") else g.nvlink_domain,
                g.rack)
        for g in racked_fleet({0: "r1", 1: "r2", 2: "r2", 3: "r3"})
    ]  # fmt: skip
    state = ClusterState(NOW, gpus, [job(1, count=8, same_node=False)], quotas=quotas())
    assert {gpus[g].node for g in placed(schedule(state))[1]} == {"n2", "n3"}


def test_unlabelled_nodes_keep_the_fewest_nodes_choice():
    gpus = racked_fleet({0: None, 1: "r2", 2: None})
    run = [running(9, "nlp", [4, 5])]  # n1 has 2 free: the gang takes n0 and n2 whole
    state = ClusterState(NOW, gpus, [job(1, count=8, same_node=False)], run, quotas=quotas())
    assert {gpus[g].node for g in placed(schedule(state))[1]} == {"n0", "n2"}


def spare_decision(order: str, queued: list[QueuedJob], usage=None):
    """One free GPU, both teams above their guarantee (0): the spare pool decides."""
    state = ClusterState(NOW, fleet(1, 1), queued, quotas=quotas(g=0, limit=8), usage=usage or {})
    return set(placed(schedule(state, config=SchedulerConfig(spare_order=order))))


def test_spare_pool_orders_share_las_and_slowdown():
    # vision's job ran an hour before it was requeued; nlp's is fresh and submitted later.
    requeued = job(1, "vision", age=3600, runtime=7200, attained=3600.0)
    fresh = job(2, "nlp", age=600, runtime=7200)
    assert spare_decision("share", [requeued, fresh]) == {1}  # equal shares: aging, oldest
    assert spare_decision("las", [requeued, fresh]) == {2}  # least attained service first
    # slowdown: a 10-minute job waiting 20 minutes (ratio 3) beats a 2-hour job waiting an
    # hour (ratio 1.5), and beats the lower share of its team.
    long_wait = job(3, "vision", age=3600, runtime=7200)
    short = job(4, "nlp", age=1200, runtime=600)
    heavy = {"nlp": 512 * 7 * 24 * 3600.0}  # nlp used the fleet a whole week
    assert spare_decision("share", [long_wait, short], heavy) == {3}
    assert spare_decision("slowdown", [long_wait, short], heavy) == {4}


def test_unknown_spare_order_is_refused():
    with pytest.raises(ValueError, match="spare order"):
        schedule(ClusterState(NOW, fleet(1, 1), []), config=SchedulerConfig(spare_order="lifo"))


def test_backfill_before_a_future_booking():
    gpus = fleet(1, 4)
    bookings = [Booking(7, "nlp", g, NOW + 3600, NOW + 7200) for g in range(4)]
    short = job(1, count=4, runtime=1800)
    state = ClusterState(NOW, gpus, [short], bookings=bookings, quotas=quotas())
    assert set(placed(schedule(state))[1]) == {0, 1, 2, 3}


def test_booked_gpus_unusable_when_booking_overlaps_the_run():
    gpus = fleet(1, 4)
    bookings = [Booking(7, "nlp", g, NOW + 3600, NOW + 7200) for g in range(4)]
    long = job(1, count=4, runtime=7200)
    d = schedule(ClusterState(NOW, gpus, [long], bookings=bookings, quotas=quotas()))
    assert placed(d) == {}
    assert pending(d)[1].reason == PendingReason.RESERVED


def test_active_booking_gpus_only_for_their_reservation():
    gpus = fleet(1, 4)
    bookings = [Booking(7, "nlp", g, NOW - 60, NOW + 3600) for g in (0, 1)]
    state = ClusterState(
        NOW,
        gpus,
        [job(1, count=3), job(2, "nlp", count=2, reservation_id=7), job(3, count=2)],
        bookings=bookings,
        quotas=quotas(),
    )
    d = schedule(state)
    assert set(placed(d)[2]) == {0, 1}
    assert set(placed(d)[3]) == {2, 3}
    assert 1 in pending(d)


def test_reservation_not_active():
    gpus = fleet(1, 4)
    bookings = [Booking(7, "nlp", 0, NOW + 60, NOW + 3600)]
    d = schedule(
        ClusterState(
            NOW, gpus, [job(1, "nlp", reservation_id=7)], bookings=bookings, quotas=quotas()
        )
    )
    assert pending(d)[1].reason == PendingReason.RESERVATION_NOT_ACTIVE


def test_quota_limit_reached_message():
    state = ClusterState(
        NOW,
        fleet(4, 8),
        [job(1, count=8), job(2, count=8)],
        [running(9, "vision", range(0, 4), over=False)],
        quotas=[TeamQuota("vision", H100, 4, 12)],
    )
    d = schedule(state)
    assert 1 in placed(d)
    assert pending(d)[2].reason == PendingReason.QUOTA_REACHED
    assert pending(d)[2].message == f"Team vision is at its quota of 12 {H100} GPUs."


def test_guarantee_first_then_over_quota_flag():
    state = ClusterState(
        NOW, fleet(2, 8), [job(1, count=4), job(2, count=8)], quotas=quotas(g=4, limit=16)
    )
    d = {p.job_id: p for p in schedule(state).placements}
    assert d[1].over_quota is False
    assert d[2].over_quota is True


def test_preemption_stops_the_victims_losing_least_gpu_time_and_starts_the_job_on_them():
    gpus = fleet(1, 8)
    run = [
        running(10, "nlp", [0, 1, 2, 3], started=NOW - 7200),  # 8 GPU-hours at stake
        running(11, "nlp", [4, 5], started=NOW - 3600),  # 2 GPU-hours
        running(12, "nlp", [6, 7], started=NOW - 2000),  # 1.1 GPU-hours
    ]
    waiting = [job(1, count=4, runtime=7200), job(2, "nlp", count=1)]
    state = ClusterState(NOW, gpus, waiting, run, quotas=quotas(g=4, limit=8))
    d = schedule(state)
    assert sorted((p.job_id, p.for_job_id) for p in d.preemptions) == [(11, 1), (12, 1)]
    lost = {p.job_id: p.gpu_seconds_lost for p in d.preemptions}
    assert lost == {11: 2 * 3600.0, 12: 2 * 2000.0}
    assert placed(d) == {}  # nothing starts now on GPUs still held by stopping jobs
    assert [(p.job_id, set(p.gpu_ids)) for p in d.after_preemption] == [(1, {4, 5, 6, 7})]
    assert pending(d)[1].reason == PendingReason.WAITING_FOR_PREEMPTION


def test_young_jobs_are_not_preempted_before_the_minimum_runtime():
    run = [running(10, "nlp", range(8), started=NOW - 600)]
    waiting = [job(1, count=2, runtime=7200)]
    state = ClusterState(NOW, fleet(1, 8), waiting, run, quotas=quotas(g=4, limit=8))
    assert schedule(state).preemptions == []
    cfg = SchedulerConfig(preempt_min_runtime_seconds=300)
    assert [p.job_id for p in schedule(state, "fairshare", cfg).preemptions] == [10]


def test_checkpointable_victim_preferred_and_loses_nothing():
    run = [
        running(10, "nlp", [0, 1, 2, 3], started=NOW - 2000),
        RunningJob(11, "nlp", H100, (4, 5, 6, 7), NOW - 9000, 3600.0,
                   PriorityClass.OVER_QUOTA, True, checkpointable=True),
    ]  # fmt: skip
    state = ClusterState(NOW, fleet(1, 8), [job(1, count=4)], run, quotas=quotas(g=4, limit=8))
    d = schedule(state)
    assert [(p.job_id, p.gpu_seconds_lost) for p in d.preemptions] == [(11, 0.0)]


def test_a_job_preempted_max_times_yields_last_but_never_blocks_a_reclaim():
    protected = RunningJob(10, "nlp", H100, tuple(range(8)), NOW - 9000, 3600.0,
                           PriorityClass.OVER_QUOTA, True, checkpointable=True,
                           preemptions=2)  # fmt: skip
    state = ClusterState(NOW, fleet(1, 8), [job(1, count=2)], [protected], quotas=quotas(g=4))
    assert schedule(state).preemptions == []  # outside the bounds: not before its patience
    state.queued = [job(1, count=2, age=600)]
    # the only over-quota work left: it stops, the guarantee comes back
    assert [p.job_id for p in schedule(state).preemptions] == [10]
    # beside a victim within the bounds, the protected job is spared
    other = RunningJob(11, "nlp", H100, tuple(range(8, 16)), NOW - 2000, 3600.0,
                       PriorityClass.OVER_QUOTA, True, checkpointable=True)  # fmt: skip
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=2)], [protected, other],
                         quotas=quotas(g=4))  # fmt: skip
    assert [p.job_id for p in schedule(state).preemptions] == [11]


def test_past_its_patience_a_reclaim_spares_a_job_preempted_max_times_while_others_can_yield():
    # Both nlp jobs would lose more than the budget (half of 2 GPUs x 1 h); the job preempted
    # twice already would lose less, yet the other stops: the cap on preemptions per job goes
    # last, after the loss budget.
    twice = RunningJob(10, "nlp", H100, tuple(range(8)), NOW - 2000, 36_000.0,
                       PriorityClass.OVER_QUOTA, True, preemptions=2)  # fmt: skip
    once = RunningJob(11, "nlp", H100, tuple(range(8, 16)), NOW - 9000, 36_000.0,
                      PriorityClass.OVER_QUOTA, True, preemptions=1)  # fmt: skip
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=2, age=600)], [twice, once],
                         quotas=quotas(g=4))  # fmt: skip
    assert [(p.job_id, p.gpu_seconds_lost) for p in schedule(state).preemptions] == [
        (11, 8 * 9000.0)
    ]
    # A job that resumes from its checkpoint loses nothing by stopping once more: it goes first.
    state.running = [dataclasses.replace(twice, checkpointable=True), once]
    assert [(p.job_id, p.gpu_seconds_lost) for p in schedule(state).preemptions] == [(10, 0.0)]


def test_no_preemption_unless_the_waiting_job_then_starts_at_once():
    # 6 over-quota GPUs could be freed on the node, but the job needs 8 on one node and two
    # GPUs are held within nlp's guarantee: stopping the others would not start it.
    run = [
        running(10, "nlp", range(6), started=NOW - 9000),
        running(11, "nlp", [6, 7], started=NOW - 9000, over=False),
    ]
    state = ClusterState(NOW, fleet(1, 8), [job(1, count=8)], run, quotas=quotas(g=8, limit=8))
    d = schedule(state)
    assert d.preemptions == [] and d.after_preemption == []
    assert pending(d)[1].reason == PendingReason.NO_CAPACITY


def test_victims_chosen_on_the_one_node_that_frees_the_gang():
    # A 4-GPU job must run on one node: on n0 stopping the 1-GPU job 11 (2,000 GPU-s) frees
    # enough beside 3 free GPUs; on n1 it would take job 20 (4 x 1,900 GPU-s) or 21.
    run = [
        running(10, "nlp", range(4), started=NOW - 9000),
        running(11, "nlp", [4], started=NOW - 2000),
        running(20, "nlp", [8, 9, 10, 11], started=NOW - 1900),
        running(21, "nlp", [12, 13, 14, 15], started=NOW - 1900),
    ]
    state = ClusterState(NOW, fleet(2, 8), [job(1, count=4)], run, quotas=quotas(g=4, limit=16))
    d = schedule(state)
    assert [p.job_id for p in d.preemptions] == [11]
    assert set(d.after_preemption[0].gpu_ids) == {4, 5, 6, 7}


def test_the_loss_budget_chooses_victims_but_never_vetoes_a_reclaim():
    # 8 GPUs x 2.5 h would be lost for a 2-GPU hour: no victim within the budget. The job
    # first waits its patience for GPUs to come back by themselves, then the reclaim lands.
    run = [running(10, "nlp", range(8), started=NOW - 9000)]
    young = ClusterState(NOW, fleet(1, 8), [job(1, count=2, age=60)], run, quotas=quotas(g=4))
    assert schedule(young).preemptions == []
    cfg = SchedulerConfig(preempt_max_lost_ratio=10.0)  # within a larger budget: at once
    assert [p.gpu_seconds_lost for p in schedule(young, "fairshare", cfg).preemptions] == [
        8 * 9000.0
    ]
    patient = ClusterState(NOW, fleet(1, 8), [job(1, count=2, age=600)], run, quotas=quotas(g=4))
    d = schedule(patient)
    assert [(p.job_id, p.gpu_seconds_lost) for p in d.preemptions] == [(10, 8 * 9000.0)]
    assert d.after_preemption[0].job_id == 1


def test_only_work_above_its_teams_guarantee_yields():
    # nlp runs 4 GPUs, all within its guarantee of 4, though placed over quota when it held
    # more: vision's guarantee must come from elsewhere (here nothing: no preemption).
    run = [running(10, "nlp", range(4), started=NOW - 9000)]
    state = ClusterState(NOW, fleet(1, 4), [job(1, count=2, age=3600)], run, quotas=quotas(g=4))
    assert schedule(state).preemptions == []
    run.append(running(11, "nlp", [4, 5], started=NOW - 9000))  # now 2 GPUs above it
    state = ClusterState(NOW, fleet(1, 8), [job(1, count=4, age=3600)], run, quotas=quotas(g=4))
    d = schedule(state)
    assert len(d.preemptions) == 1 and d.after_preemption[0].job_id == 1


def test_no_preemption_above_guarantee_or_in_baselines():
    run = [running(10, "nlp", range(8), started=NOW - 9000)]
    q = [TeamQuota("vision", H100, 2, 8), TeamQuota("nlp", H100, 2, 8)]
    big = ClusterState(NOW, fleet(1, 8), [job(1, count=4)], run, quotas=q)
    assert schedule(big).preemptions == []  # it would run over its guarantee: never preempt
    small = ClusterState(NOW, fleet(1, 8), [job(1, count=2, runtime=80000)], run, quotas=q)
    assert len(schedule(small).preemptions) == 1
    assert schedule(small, "fifo").preemptions == []
    no = SchedulerConfig(preemption_enabled=False)
    assert schedule(small, "fairshare", no).preemptions == []


def test_fair_share_prefers_team_with_less_usage():
    state = ClusterState(
        NOW,
        fleet(1, 8),
        [job(1, "vision", 8, age=100), job(2, "nlp", 8, age=10)],
        quotas=quotas(g=0, limit=8),
        usage={"vision": 1e9, "nlp": 0.0},
    )
    d = schedule(state)
    assert list(placed(d)) == [2]
    assert pending(d)[1].reason == PendingReason.FAIR_SHARE
    assert pending(d)[1].message == "Waiting behind fair share: 1 job of other teams comes first."


def test_aging_overcomes_usage():
    cfg = SchedulerConfig(aging_per_hour=10.0)
    state = ClusterState(
        NOW,
        fleet(1, 8),
        [job(1, "vision", 8, age=3 * 86400), job(2, "nlp", 8, age=10)],
        quotas=quotas(g=0, limit=8),
        usage={"vision": 8 * 3600.0, "nlp": 0.0},
    )
    assert list(placed(schedule(state, "fairshare", cfg))) == [1]
    assert list(placed(schedule(state, "fairshare", SchedulerConfig(aging_per_hour=0)))) == [2]


def test_fifo_vs_sjf_order():
    q = [job(1, count=8, runtime=7200, age=100), job(2, count=8, runtime=60, age=10)]
    state = ClusterState(NOW, fleet(1, 8), q, quotas=quotas(limit=8))
    assert list(placed(schedule(state, "fifo"))) == [1]
    assert list(placed(schedule(state, "sjf"))) == [2]


def test_estimated_start_from_running_end_times():
    run = [running(9, "nlp", range(8), started=NOW - 600, runtime=3600)]
    d = schedule(ClusterState(NOW, fleet(1, 8), [job(1, count=4)], run, quotas=quotas(g=0)))
    assert pending(d)[1].estimated_start == pytest.approx(NOW + 3000)


def test_any_model_job_and_unknown_model():
    gpus = fleet(1, 2) + [GpuInfo(100, "l", "L40S", None)]
    any_model = [TeamQuota("vision", None, 0, 8)]
    d = schedule(
        ClusterState(NOW, gpus, [job(1, model=None), job(2, model="A100")], quotas=any_model)
    )
    assert 1 in placed(d)
    assert pending(d)[2].reason == PendingReason.NO_CAPACITY


def test_decay_usage_halves():
    out = decay_usage({"a": 100.0}, [running(1, "b", [0, 1])], elapsed=10, half_life=10)
    assert out == {"a": 50.0, "b": 20.0}


# -- properties -------------------------------------------------------------------------------

MODELS = ["H100", "L40S"]
TEAMS = ["vision", "nlp", "audio"]


@st.composite
def states(draw):
    nodes = draw(st.integers(1, 5))
    gpus = []
    for n in range(nodes):
        model = draw(st.sampled_from(MODELS))
        for _i in range(draw(st.integers(1, 8))):
            gpus.append(GpuInfo(len(gpus), f"n{n}", model, f"d{n // 2}"))
    ids = [g.gpu_id for g in gpus]
    free = list(ids)
    running_jobs = []
    for k in range(draw(st.integers(0, 4))):
        take = draw(st.integers(0, min(3, len(free))))
        if not take:
            continue
        chosen = free[:take]
        free = free[take:]
        model = gpus[chosen[0]].model
        running_jobs.append(
            RunningJob(
                1000 + k,
                draw(st.sampled_from(TEAMS)),
                model,
                tuple(chosen),
                NOW - draw(st.integers(0, 5000)),
                3600.0,
                PriorityClass.OVER_QUOTA,
                draw(st.booleans()),
            )
        )
    bookings = []
    for gid in draw(st.lists(st.sampled_from(ids), max_size=4, unique=True)):
        start = NOW + draw(st.integers(-3600, 7200))
        bookings.append(Booking(500 + gid % 2, "nlp", gid, start, start + 3600))
    queued = [
        QueuedJob(
            k,
            draw(st.sampled_from(TEAMS)),
            draw(st.sampled_from([*MODELS, None])),
            draw(st.integers(1, 6)),
            float(draw(st.sampled_from([600, 3600, 10800]))),
            NOW - draw(st.integers(0, 10000)),
            draw(st.sampled_from(list(PriorityClass))),
            draw(st.booleans()),
            draw(st.sampled_from([None, None, None, 500, 501])),
        )
        for k in range(draw(st.integers(0, 12)))
    ]
    qs = []
    for team in TEAMS:
        for model in MODELS:
            g = draw(st.integers(0, 4))
            qs.append(TeamQuota(team, model, g, g + draw(st.integers(0, 6))))
    return ClusterState(NOW, gpus, queued, running_jobs, bookings, qs, {})


@settings(max_examples=150, deadline=None)
@given(states(), st.sampled_from(["fairshare", "fifo", "sjf"]))
def test_properties(state, policy):
    d = schedule(state, policy)
    gpu_by_id = {g.gpu_id: g for g in state.gpus}
    # Every queued job is either placed or pending, exactly once.
    ids = [p.job_id for p in d.placements] + [p.job_id for p in d.pending]
    assert sorted(ids) == sorted(j.job_id for j in state.queued)
    # No GPU double-placed, none on running jobs' GPUs.
    used = [g for p in d.placements for g in p.gpu_ids]
    assert len(used) == len(set(used))
    busy = {g for r in state.running for g in r.gpu_ids}
    assert not busy & set(used)
    jobs = {j.job_id: j for j in state.queued}
    quota = {(q.team, q.model): q for q in state.quotas}
    per_key: dict = {}
    for r in state.running:
        per_key[(r.team, r.model)] = per_key.get((r.team, r.model), 0) + len(r.gpu_ids)
    for p in d.placements:
        j = jobs[p.job_id]
        assert len(p.gpu_ids) == j.gpu_count  # gang
        models = {gpu_by_id[g].model for g in p.gpu_ids}
        assert len(models) == 1
        if j.gpu_model:
            assert models == {j.gpu_model}
        if j.same_node:
            assert len({gpu_by_id[g].node for g in p.gpu_ids}) == 1
        for g in p.gpu_ids:
            for b in state.bookings:
                if b.start <= NOW < b.end:  # active booking: only its reservation
                    if b.gpu_id == g:
                        assert j.reservation_id == b.reservation_id
                elif b.gpu_id == g and b.end > NOW and j.reservation_id is None:
                    assert NOW + j.max_runtime <= b.start  # backfill ends before booking
        if j.reservation_id is None:
            key = (j.team, models.pop())
            per_key[key] = per_key.get(key, 0) + j.gpu_count
    # Placements respect limits (running work counted; reservation jobs exempt).
    for key, n in per_key.items():
        q = quota[key]
        placed_here = any(
            jobs[p.job_id].team == key[0] and jobs[p.job_id].reservation_id is None
            for p in d.placements
        )
        if placed_here:
            assert n <= max(
                q.limit, sum(len(r.gpu_ids) for r in state.running if (r.team, r.model) == key)
            )
    # No job is placed on GPUs the decision preempts.
    pre = {x.job_id for x in d.preemptions}
    assert pre <= {r.job_id for r in state.running}


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 3))
def test_guarantee_met_when_team_has_demand(g_vision, g_nlp, extra):
    """With nlp filling spare capacity over quota, vision always gets its guarantee back."""
    gpus = fleet(1, 8)
    used_by_nlp = 8
    run = [running(100 + i, "nlp", [i], started=NOW - 1800 - i) for i in range(used_by_nlp)]
    qs = [TeamQuota("vision", H100, g_vision, 8), TeamQuota("nlp", H100, g_nlp, 8)]
    queued = [job(k, "vision", 1, runtime=7200) for k in range(g_vision + extra)]
    d = schedule(ClusterState(NOW, gpus, queued, run, quotas=qs))
    waiting = [p for p in d.pending if p.reason == PendingReason.WAITING_FOR_PREEMPTION]
    freed = sum(1 for _ in d.preemptions)
    assert len(waiting) == min(g_vision, 8)
    assert freed == len(waiting)


def test_pending_messages_count_gpus_in_the_right_number():
    from apps.jobs.scheduler.explain import gpu_count

    assert gpu_count(1, H100) == f"1 {H100} GPU"
    assert gpu_count(12, H100) == f"12 {H100} GPUs"
    assert gpu_count(1, None) == "1 GPU of any model"


def test_a_job_waiting_for_its_guarantee_is_told_who_stops_for_it_and_when():
    run = [
        running(10, "nlp", range(4), started=NOW - 600),
        running(11, "audio", range(4, 8), started=NOW - 300),
    ]
    q = [TeamQuota("vision", H100, 8, 8), TeamQuota("nlp", H100, 0, 8),
         TeamQuota("audio", H100, 0, 8)]  # fmt: skip
    d = schedule(ClusterState(NOW, fleet(1, 8), [job(1, count=8)], run, quotas=q))
    waiting = pending(d)[1]
    assert d.preemptions == [] and waiting.reason == PendingReason.RECLAIMING_GUARANTEE
    # audio's job has run 5 of its 30 minimum minutes: the last to become preemptible
    assert waiting.message == (
        "Reclaiming your guarantee: 1 job of team audio and 1 job of team nlp stop in 25 min."
    )
    assert waiting.estimated_start == NOW + 1500


def test_tiresias_order_serves_jobs_of_one_attained_queue_in_queue_order():
    # Both jobs attained less than an hour of GPU time: one queue, the older job first. LAS
    # without queues serves the one that attained less.
    q = [TeamQuota("vision", H100, 0, 8), TeamQuota("nlp", H100, 0, 8)]
    waiting = [
        job(1, "vision", 8, age=600, attained=1000.0),
        job(2, "nlp", 8, age=60, attained=10.0),
    ]
    state = ClusterState(NOW, fleet(1, 8), waiting, quotas=q)
    assert list(placed(schedule(state, "fairshare", SchedulerConfig(spare_order="las")))) == [2]
    tiresias = SchedulerConfig(spare_order="tiresias")
    assert list(placed(schedule(state, "fairshare", tiresias))) == [1]
    # past the first queue's bound (1 GPU-hour) the older job waits behind
    state.queued[0] = job(1, "vision", 8, age=600, attained=4000.0)
    assert list(placed(schedule(state, "fairshare", tiresias))) == [2]
