"""Booking admission and the scheduler apply one quota rule to one holding: on the same
bookings, running jobs and quota rows, a job of n GPUs for R seconds starts now exactly when a
booking of n GPUs over [now, now + R) would be admitted, and it is over quota exactly when the
booking would be. Fleets here are large enough that only the quota decides."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from apps.jobs.scheduler import schedule
from apps.jobs.scheduler.config import SchedulerConfig
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
from apps.teams.quota_rule import Holdings, QuotaRule, job_held_until

NOW = 1_000_000.0
MODELS = ("H100", "L40S")
TEAM = "vision"
GRACE = SchedulerConfig().grace_seconds


def _fleet() -> list[GpuInfo]:
    # 6 nodes x 8 GPUs per model: more than any drawn holding plus request.
    return [
        GpuInfo(m * 100 + n * 8 + i, f"{model}-{n}", model)
        for m, model in enumerate(MODELS)
        for n in range(6)
        for i in range(8)
    ]


@st.composite
def holdings(draw):
    """Bookings and running jobs of the team (and a bit of another team's), on distinct GPUs."""
    next_gpu = {model: m * 100 for m, model in enumerate(MODELS)}

    def take(model: str, n: int) -> list[int]:
        first = next_gpu[model]
        next_gpu[model] += n
        return list(range(first, first + n))

    bookings, running = [], []
    for rid in range(draw(st.integers(0, 4))):
        model = draw(st.sampled_from(MODELS))
        start = NOW + draw(st.sampled_from([-7200, -600, 0, 600, 3600, 14400]))
        end = start + draw(st.sampled_from([1800, 3600, 7200, 28800]))
        team = draw(st.sampled_from([TEAM, TEAM, "nlp"]))
        for gid in take(model, draw(st.integers(1, 4))):
            bookings.append(Booking(100 + rid, team, gid, start, end, model))
    for k in range(draw(st.integers(0, 4))):
        model = draw(st.sampled_from(MODELS))
        team = draw(st.sampled_from([TEAM, TEAM, "nlp"]))
        running.append(
            RunningJob(
                1000 + k,
                team,
                model,
                tuple(take(model, draw(st.integers(1, 4)))),
                NOW - draw(st.sampled_from([60, 1800, 7200])),
                float(draw(st.sampled_from([3600, 10800, 86400]))),
                PriorityClass.OVER_QUOTA,
                True,
            )
        )
    return bookings, running


@st.composite
def quota_rows(draw):
    rows = []
    for model in (*MODELS, None):
        if draw(st.booleans()):
            g = draw(st.integers(0, 8))
            rows.append(TeamQuota(TEAM, model, g, g + draw(st.integers(0, 8))))
    rows.append(TeamQuota("nlp", None, 0, 100))
    return rows


def booking_verdict(rows, bookings, running, model, count, runtime):
    """What booking admission decides: ``reservations.services.check_quota`` counts the same
    intervals (bookings, and running jobs until their maximum runtime, or the kill's grace
    period for one that outran it) and asks the rule."""
    held = Holdings()
    for b in bookings:
        held.add(b.team, b.model, b.start, b.end, 1)
    for r in running:
        until = job_held_until(r.started_at + r.max_runtime, NOW, GRACE)
        held.add(r.team, r.model, r.started_at, until, len(r.gpu_ids))
    return QuotaRule(rows).admit(TEAM, model, count, NOW, NOW + runtime, held)


@settings(max_examples=300, deadline=None)
@given(
    holdings(),
    quota_rows(),
    st.sampled_from(MODELS),
    st.integers(1, 8),
    st.sampled_from([600.0, 3600.0, 21600.0]),
    st.sampled_from(["fairshare", "fifo"]),
)
def test_booking_admission_and_the_scheduler_agree(held, rows, model, count, runtime, policy):
    bookings, running = held
    queued = [QueuedJob(1, TEAM, model, count, runtime, NOW - 60, same_node=False)]
    state = ClusterState(NOW, _fleet(), queued, running, bookings, rows)
    decision = schedule(state, policy)
    verdict = booking_verdict(rows, bookings, running, model, count, runtime)
    placed = {p.job_id: p for p in decision.placements}
    assert (1 in placed) == verdict.admitted
    if verdict.admitted:
        assert placed[1].over_quota == verdict.over_guarantee
    else:
        # Larger than a limit: it waits for the quota to change, not for GPUs to free up.
        rule = QuotaRule(rows)
        beyond = bool(rule.rows_for(TEAM, model)) and count > rule.ceiling(TEAM, model)
        expected = PendingReason.BEYOND_QUOTA if beyond else PendingReason.QUOTA_REACHED
        assert {p.job_id: p.reason for p in decision.pending}[1] == expected


def test_four_booked_and_four_running_on_a_limit_of_eight_leave_no_ninth():
    rows = [TeamQuota(TEAM, "H100", 4, 8)]
    bookings = [Booking(7, TEAM, gid, NOW - 600, NOW + 7200, "H100") for gid in range(4)]
    running = [
        RunningJob(50, TEAM, "H100", (4, 5, 6, 7), NOW - 60, 7200.0, PriorityClass.OVER_QUOTA, True)
    ]
    job = QueuedJob(1, TEAM, "H100", 1, 600.0, NOW - 60)
    for policy in ("fairshare", "fifo"):
        decision = schedule(ClusterState(NOW, _fleet(), [job], running, bookings, rows), policy)
        assert decision.placements == []
        assert decision.pending[0].reason == PendingReason.QUOTA_REACHED
        assert "quota of 8 H100 GPUs" in decision.pending[0].message
    verdict = booking_verdict(rows, bookings, running, "H100", 1, 600.0)
    assert verdict.refused_by == rows[0] and verdict.held == 8


def test_a_job_waits_when_it_would_still_run_as_a_team_booking_starts():
    rows = [TeamQuota(TEAM, "H100", 0, 4)]
    later = [Booking(7, TEAM, gid, NOW + 3600, NOW + 7200, "H100") for gid in range(4)]
    short = QueuedJob(1, TEAM, "H100", 2, 1800.0, NOW - 60)
    long = QueuedJob(2, TEAM, "H100", 2, 7200.0, NOW - 30)
    decision = schedule(ClusterState(NOW, _fleet(), [short, long], [], later, rows))
    assert [p.job_id for p in decision.placements] == [1]
    waiting = {p.job_id: p for p in decision.pending}[2]
    assert waiting.reason == PendingReason.QUOTA_REACHED
    assert "bookings" in waiting.message


def test_a_team_without_a_quota_row_runs_nothing_and_is_told_why():
    rows = [TeamQuota("nlp", "H100", 4, 8)]
    decision = schedule(ClusterState(NOW, _fleet(), [QueuedJob(1, TEAM, "H100", 1, 60.0, NOW)]))
    assert decision.placements == []
    decision = schedule(
        ClusterState(NOW, _fleet(), [QueuedJob(1, TEAM, "H100", 1, 60.0, NOW)], quotas=rows)
    )
    assert decision.placements == []
    assert decision.pending[0].reason == PendingReason.QUOTA_REACHED
    assert decision.pending[0].message == (
        "Team vision has no quota for H100; a platform admin gives quotas."
    )
