"""The incremental replay engine: same decisions as rebuilding the state at every event,
preemption that a loaded cluster can live with, multi-node gangs, honest metrics."""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.jobs.scheduler import SchedulerConfig
from apps.jobs.scheduler.replay import (
    JOB_COLUMNS,
    TraceJob,
    simulate,
    user_runtime_limit,
    write_job_rows,
)
from apps.jobs.scheduler.state import GpuInfo, TeamQuota
from apps.jobs.scheduler.trace import default_quotas, parse_fleet

TEAMS = ["vision", "nlp", "audio"]


@st.composite
def traces(draw, lender_burst: bool = False):
    """A random fleet, jobs and quotas; with ``lender_burst`` one team first fills the fleet
    with day-long jobs that the others' guarantees then reclaim, so jobs stop and restart."""
    nodes = draw(st.integers(1, 4))
    per_node = draw(st.sampled_from([2, 4, 8]))
    models = draw(st.sampled_from([["A"], ["A", "B"]]))
    gpus = []
    for n in range(nodes):
        model = models[n % len(models)]
        for _i in range(per_node):
            gpus.append(GpuInfo(len(gpus), f"n{n}", model, f"d{n // 2}"))
    jobs = []
    t = 0.0
    if lender_burst:
        lender = draw(st.sampled_from(TEAMS))
        for _ in range(draw(st.integers(1, 12))):
            size = draw(st.sampled_from([1, 1, 2, 4]))
            jobs.append(TraceJob(len(jobs) + 1, 0.0, 90_000.0, size, lender, same_node=True))
    for k in range(len(jobs), len(jobs) + draw(st.integers(1, 40))):
        t += draw(st.sampled_from([0, 0, 30, 600, 3600]))
        jobs.append(
            TraceJob(
                k + 1,
                t,
                float(draw(st.sampled_from([60, 1800, 2400, 7200, 20000]))),
                draw(st.sampled_from([1, 1, 1, 2, 3, 4, 8, 12])),
                draw(st.sampled_from(TEAMS)),
                draw(st.sampled_from([None, None, *models])),
                same_node=draw(st.booleans()),
                checkpointable=draw(st.booleans()),
                user=draw(st.sampled_from([None, "ann", "bob"])),
            )
        )
    quotas = []
    for team in TEAMS:
        for model in models:
            g = draw(st.integers(0, len(gpus) // 2))
            quotas.append(TeamQuota(team, model, g, g + draw(st.integers(0, len(gpus)))))
    return jobs, gpus, quotas


@settings(max_examples=120, deadline=None)
@given(traces(), st.sampled_from(["fairshare", "fifo", "sjf"]))
def test_incremental_and_rebuild_every_event_make_identical_decisions(trace, policy):
    jobs, gpus, quotas = trace
    config = SchedulerConfig(preempt_min_runtime_seconds=600, preempt_max_lost_ratio=4.0)
    kept, rebuilt = [], []
    a = simulate(jobs, gpus, quotas, policy, config, decisions=kept)
    b = simulate(jobs, gpus, quotas, policy, config, incremental=False, decisions=rebuilt)
    assert kept == rebuilt
    assert a.job_rows == b.job_rows
    assert a.finished + a.never_fit == len(jobs)


@settings(max_examples=60, deadline=None)
@given(traces(lender_burst=True))
def test_jobs_that_restart_within_the_guarantee_decide_the_same_incrementally(trace):
    """A reclaim stops some of the lender's day-long jobs; each restarts only within its
    team's guarantee (``reborrow_max_runtime_seconds``), whichever engine decides."""
    jobs, gpus, quotas = trace
    config = SchedulerConfig(preempt_min_runtime_seconds=600, preempt_max_lost_ratio=4.0)
    kept, rebuilt = [], []
    a = simulate(jobs, gpus, quotas, "fairshare", config, decisions=kept)
    b = simulate(jobs, gpus, quotas, "fairshare", config, incremental=False, decisions=rebuilt)
    assert kept == rebuilt and a.job_rows == b.job_rows
    assert a.finished + a.never_fit == len(jobs)


@settings(max_examples=60, deadline=None)
@given(traces(), st.sampled_from(["las", "tiresias", "slowdown"]))
def test_other_spare_orders_also_decide_the_same_incrementally(trace, spare_order):
    jobs, gpus, quotas = trace
    config = SchedulerConfig(
        preempt_min_runtime_seconds=600, preempt_max_lost_ratio=4.0, spare_order=spare_order
    )
    kept, rebuilt = [], []
    a = simulate(jobs, gpus, quotas, "fairshare", config, decisions=kept)
    b = simulate(jobs, gpus, quotas, "fairshare", config, incremental=False, decisions=rebuilt)
    assert kept == rebuilt and a.job_rows == b.job_rows


@settings(max_examples=60, deadline=None)
@given(traces())
def test_packing_borrowed_work_also_decides_the_same_incrementally(trace):
    jobs, gpus, quotas = trace
    config = SchedulerConfig(
        preempt_min_runtime_seconds=600, preempt_max_lost_ratio=4.0, pack_borrowed=True
    )
    kept, rebuilt = [], []
    a = simulate(jobs, gpus, quotas, "fairshare", config, decisions=kept)
    b = simulate(jobs, gpus, quotas, "fairshare", config, incremental=False, decisions=rebuilt)
    assert kept == rebuilt and a.job_rows == b.job_rows


@pytest.mark.parametrize("spare_order", ["share", "las", "slowdown"])
@pytest.mark.parametrize("last_b_gpu_to", ["vision", "nlp"])
def test_a_failed_preemption_is_tried_again_when_the_job_turns_to_another_model(
    spare_order, last_b_gpu_to
):
    """Found with --hypothesis-seed=19. Vision's 2-GPU any-model job first goes for model B
    (more free GPUs), where nothing can be preempted. Then a 1-GPU job takes B's last GPU:
    vision's own (B's quota left is now too small for the 2-GPU job) or nlp's (B no longer
    has more free GPUs than A). Either way the job turns to model A, where audio's over-quota
    job can stop. The kept engine must not carry the failure on B over to A, nor skip vision
    because vision itself changed nothing."""
    gpus = [GpuInfo(g, "n0", "A", "d0") for g in range(4)]
    gpus += [GpuInfo(g, "n1", "B", "d0") for g in range(4, 6)]
    quotas = [
        TeamQuota("vision", "A", 2, 2),
        TeamQuota("vision", "B", 3, 3),
        TeamQuota("audio", "A", 0, 4),
        TeamQuota("audio", "B", 0, 0),
        TeamQuota("nlp", "A", 0, 0),
        TeamQuota("nlp", "B", 0, 1),
    ]
    jobs = [
        TraceJob(1, 0, 7200, 4, "audio", "A", checkpointable=True),
        TraceJob(2, 0, 7200, 1, "vision", "B"),
        TraceJob(3, 3600, 60, 2, "vision"),
        TraceJob(4, 3630, 60, 1, last_b_gpu_to, "B"),
    ]
    config = SchedulerConfig(
        preempt_min_runtime_seconds=600, preempt_max_lost_ratio=4.0, spare_order=spare_order
    )
    kept, rebuilt = [], []
    a = simulate(jobs, gpus, quotas, "fairshare", config, decisions=kept)
    b = simulate(jobs, gpus, quotas, "fairshare", config, incremental=False, decisions=rebuilt)
    # job 4 takes B's last GPU, then audio's job stops for job 3, which starts on A
    over_quota = last_b_gpu_to == "nlp"
    assert (3630.0, [(4, (5,), over_quota)], [(1, 3)], [(3, (0, 1))]) in rebuilt
    assert kept == rebuilt and a.job_rows == b.job_rows


def test_a_waiting_any_model_job_drains_the_model_it_would_pick_now():
    """Found by the property test above. At 0 s audio's 4-GPU job of any model waits within
    its guarantee: A has 3 free GPUs, B none, so it goes for A and A's free GPUs are held
    back for it, which keeps nlp's over-quota job off A. At 60 s vision's jobs end and B has
    more free GPUs: a rebuilt engine turns the job to B and holds B's GPUs back, and nlp's
    job starts on A. The kept engine must not go on holding A for the job found at 0 s
    (audio's own queue and holdings did not change)."""
    gpus = [GpuInfo(g, "n0", "A", "d0") for g in range(8)]
    gpus += [GpuInfo(g, "n1", "B", "d0") for g in range(8, 12)]
    quotas = [
        TeamQuota("vision", "A", 0, 0),
        TeamQuota("vision", "B", 5, 5),
        TeamQuota("nlp", "A", 4, 5),
        TeamQuota("nlp", "B", 0, 0),
        TeamQuota("audio", "A", 5, 5),
        TeamQuota("audio", "B", 4, 4),
    ]
    jobs = [
        TraceJob(job_id, 0, duration, count, team, same_node=False)
        for job_id, duration, count, team in [
            (1, 1800, 4, "nlp"),
            (2, 60, 1, "vision"),
            (3, 1800, 1, "audio"),
            *((k, 60, 1, "vision") for k in (4, 5, 6, 7)),
            (8, 60, 4, "audio"),
            (9, 60, 1, "nlp"),
        ]
    ]
    config = SchedulerConfig(preempt_min_runtime_seconds=600, preempt_max_lost_ratio=4.0)
    kept, rebuilt = [], []
    simulate(jobs, gpus, quotas, "fairshare", config, decisions=kept)
    simulate(jobs, gpus, quotas, "fairshare", config, incremental=False, decisions=rebuilt)
    started = {job: (t, ids) for t, placed, *_ in kept for job, ids, _ in placed}
    assert started[9] == (60.0, (5,))  # on A, beside the 4 GPUs of job 1 and job 3's one
    assert started[8] == (120.0, (8, 9, 10, 11))  # on B once vision's last job ended
    assert kept == rebuilt


def test_a_preempted_job_queues_again_with_the_gpu_seconds_it_ran(monkeypatch):
    """What "las" orders by: the replay hands the engine each requeued job's attained
    service (4 GPUs x the 1,000 s it ran before its preemption)."""
    from apps.jobs.scheduler import core

    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("vision", "A", 2, 4), TeamQuota("nlp", "A", 2, 4)]
    jobs = [TraceJob(1, 0, 20000, 4, "nlp"), TraceJob(2, 1000, 600, 2, "vision")]
    config = SchedulerConfig(
        preempt_min_runtime_seconds=600, preempt_max_lost_ratio=4.0, spare_order="las"
    )
    seen: dict[int, list[float]] = {}
    enqueue = core.Engine.enqueue

    def spy(self, job):
        seen.setdefault(job.job_id, []).append(job.attained)
        enqueue(self, job)

    monkeypatch.setattr(core.Engine, "enqueue", spy)
    result = simulate(jobs, gpus, quotas, "fairshare", config)
    assert result.preemptions == 1
    assert seen == {1: [0.0, 4000.0], 2: [0.0]}


def test_property_test_traces_do_preempt():
    """The random traces above reach the preemption paths (else the comparison is weak)."""
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("vision", "A", 2, 4), TeamQuota("nlp", "A", 2, 4)]
    jobs = [TraceJob(1, 0, 20000, 4, "nlp"), TraceJob(2, 1000, 600, 2, "vision")]
    config = SchedulerConfig(preempt_min_runtime_seconds=600, preempt_max_lost_ratio=4.0)
    kept, rebuilt = [], []
    a = simulate(jobs, gpus, quotas, "fairshare", config, decisions=kept)
    simulate(jobs, gpus, quotas, "fairshare", config, incremental=False, decisions=rebuilt)
    assert a.preemptions == 1 and kept == rebuilt
    assert kept[1][2] == [(1, 2)]  # job 1 stopped for job 2 ...
    assert kept[1][3][0][0] == 2  # ... which starts at once on the freed GPUs


def test_checkpointable_job_resumes_with_its_progress_and_loses_nothing():
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("vision", "A", 2, 4), TeamQuota("nlp", "A", 2, 4)]
    config = SchedulerConfig(preempt_min_runtime_seconds=600, preempt_max_lost_ratio=4.0)
    for checkpointable, end, lost in ((True, 20000 + 600, 0.0), (False, 1600 + 20000, 4000.0)):
        jobs = [
            TraceJob(1, 0, 20000, 4, "nlp", checkpointable=checkpointable),
            TraceJob(2, 1000, 600, 2, "vision"),
        ]
        result = simulate(jobs, gpus, quotas, "fairshare", config)
        rows = {row[0]: dict(zip(JOB_COLUMNS, row, strict=True)) for row in result.job_rows}
        # preempted at t=1000; job 2 runs 1000-1600; job 1 restarts at 1600
        assert rows[1]["preemptions"] == 1 and rows[1]["attempts"] == 2
        assert rows[1]["final_start"] == 1600
        assert rows[1]["end"] == end
        assert rows[1]["gpu_seconds_lost"] == lost
        assert result.gpu_hours_lost == lost / 3600


def test_min_runtime_bounds_preemptions_and_the_guarantee_still_comes_back():
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("vision", "A", 2, 4), TeamQuota("nlp", "A", 2, 4)]
    # vision's jobs arrive one after another while nlp's long job holds the node
    jobs = [TraceJob(1, 0, 100_000, 4, "nlp", checkpointable=True)] + [
        TraceJob(k, 2000 * k, 300, 2, "vision") for k in range(2, 12)
    ]
    config = SchedulerConfig(preempt_min_runtime_seconds=1800, max_preemptions_per_job=2)
    result = simulate(jobs, gpus, quotas, "fairshare", config)
    rows = {row[0]: dict(zip(JOB_COLUMNS, row, strict=True)) for row in result.job_rows}
    # Each vision job stops nlp's job (protected after two, but the only over-quota work), at
    # once or when nlp's restarted attempt has run its 30 minutes: never later.
    assert rows[1]["preemptions"] == 10 == result.preemptions
    for k in range(2, 12):
        assert rows[k]["first_start"] - rows[k]["submit"] <= 1800
    assert rows[3]["first_start"] == 4300 + 1800  # nlp restarted at 4300, when job 2 ended


def test_jobs_larger_than_a_node_run_as_multi_node_gangs():
    gpus = parse_fleet("4x8:A")
    jobs = [TraceJob(1, 0, 3600, 16, "llm"), TraceJob(2, 0, 3600, 32, "llm")]
    result = simulate(jobs, gpus, default_quotas(gpus, ["llm"]), "fifo")
    assert result.never_fit == 0 and result.finished == 2
    rows = {row[0]: dict(zip(JOB_COLUMNS, row, strict=True)) for row in result.job_rows}
    assert rows[1]["final_start"] == 0 and rows[2]["final_start"] == 3600  # gang, whole


def test_multi_node_placement_uses_fewest_nodes():
    gpus = parse_fleet("4x8:A")
    jobs = [TraceJob(1, 0, 3600, 4, "a"), TraceJob(2, 0, 3600, 16, "b", same_node=False)]
    decisions = []
    simulate(jobs, gpus, default_quotas(gpus, ["a", "b"]), "fifo", decisions=decisions)
    placed = dict((job_id, ids) for job_id, ids, _ in decisions[0][1])
    assert len({gpus[g].node for g in placed[2]}) == 2  # two whole free nodes, not three


def test_metrics_slowdown_jain_and_job_rows():
    gpus = parse_fleet("1x2:A")
    jobs = [TraceJob(1, 0, 100, 2, "a"), TraceJob(2, 0, 100, 2, "b"), TraceJob(3, 0, 5, 1, "c")]
    result = simulate(jobs, gpus, default_quotas(gpus, ["a", "b", "c"]), "fifo")
    # a: ends 100 (slowdown 1); b: waits 100, ends 200 (2); c: duration floored at 10 s,
    # runs after b: ends 205 -> 20.5
    assert result.team_avg_slowdown == {"a": 1.0, "b": 2.0, "c": 20.5}
    values = [1.0, 2.0, 20.5]
    expected = sum(values) ** 2 / (3 * sum(v * v for v in values))
    assert abs(result.jain_fairness - expected) < 1e-12
    assert result.team_p95_wait == {"a": 0.0, "b": 100.0, "c": 200.0}
    assert result.makespan == 205 and result.queue_length[0] == (0, 2)
    out = io.StringIO()
    assert write_job_rows(result, out) == 3
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert list(rows[0]) == list(JOB_COLUMNS)
    assert float(rows[2]["first_start"]) == 200 and float(rows[2]["end"]) == 205


def test_below_guarantee_time_counts_hours_with_work_queued():
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("a", "A", 2, 4), TeamQuota("b", "A", 2, 4)]
    # a holds all 4 GPUs (its over-quota job cannot be preempted: min runtime), b waits 1 h
    jobs = [TraceJob(1, 0, 3600, 4, "a"), TraceJob(2, 0, 600, 2, "b")]
    jobs[1] = TraceJob(2, 1, 600, 2, "b")
    config = SchedulerConfig(preempt_min_runtime_seconds=7200)
    result = simulate(jobs, gpus, quotas, "fairshare", config)
    assert abs(result.team_below_guarantee_hours["b"] - 3599 / 3600) < 1e-9
    assert result.team_below_guarantee_hours.get("a", 0.0) == 0.0


def test_replay_tells_the_scheduler_runtime_limits_users_give_not_true_durations():
    assert [user_runtime_limit(d) for d in (1, 3600, 3601, 20 * 3600, 100 * 3600)] == [
        3600, 3600, 4 * 3600, 24 * 3600, 7 * 86400,
    ]  # fmt: skip
    assert user_runtime_limit(8 * 86400) == 14 * 86400
    gpus = parse_fleet("1x8:A")
    jobs = [TraceJob(1, 0, 60, 8, "a"), TraceJob(2, 1, 3000, 8, "a"), TraceJob(3, 1, 100, 8, "a")]
    quotas = default_quotas(gpus, ["a"])

    def order(**kw):
        rows = simulate(jobs, gpus, quotas, "sjf", **kw).job_rows
        return [row[0] for row in sorted(rows, key=lambda row: row[5])]

    # Both waiting jobs are in the 1-hour class: shortest-first cannot tell them apart.
    assert order() == [1, 2, 3]
    assert order(runtime_limits="exact") == [1, 3, 2]  # the oracle knows
    # a trace's own limit is what the user gave
    jobs[1] = TraceJob(2, 1, 3000, 8, "a", max_runtime=7200)
    assert order() == [1, 3, 2]
    with pytest.raises(ValueError, match="runtime limits"):
        simulate(jobs, gpus, quotas, "sjf", runtime_limits="guess")
