"""Fair share between the users of a team: one user's thousand jobs do not starve a teammate
(each job's turn in its team's queue comes from its user's virtual clock, ``UserClock``)."""

from __future__ import annotations

import pytest

from apps.jobs.scheduler import schedule
from apps.jobs.scheduler.replay import JOB_COLUMNS, TraceJob, simulate
from apps.jobs.scheduler.state import ClusterState, QueuedJob, TeamQuota
from apps.jobs.scheduler.trace import TraceError, load_generic, parse_fleet
from apps.jobs.scheduler.usage import UserClock
from bench.tracegen import generate

HOUR = 3600.0


def starts(result) -> dict[int, float]:
    rows = (dict(zip(JOB_COLUMNS, row, strict=True)) for row in result.job_rows)
    return {row["job_id"]: row["first_start"] for row in rows}


def backlog_and_teammate(user_a, user_b):
    """User A submits 50 one-hour jobs at once on a team of 4 GPUs; B submits one a minute
    later."""
    jobs = [TraceJob(k, 0.0, 3000.0, 1, "vision", user=user_a) for k in range(1, 51)]
    jobs.append(TraceJob(99, 60.0, 3000.0, 1, "vision", user=user_b))
    return jobs


def test_a_teammates_job_starts_before_most_of_a_users_backlog():
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("vision", "A", 4, 4)]
    started = starts(simulate(backlog_and_teammate("ann", "bob"), gpus, quotas, "fairshare"))
    before_b = [k for k in range(1, 51) if started[k] < started[99]]
    after_b = [k for k in range(1, 51) if started[k] > started[99]]
    assert started[99] == 3000.0  # the first GPU that frees
    assert before_b == [1, 2, 3, 4]  # those that started before B submitted
    assert len(after_b) == 43  # 3 more of A's start beside B


def test_without_users_the_queue_is_first_come_first_served():
    gpus = parse_fleet("1x4:A")
    quotas = [TeamQuota("vision", "A", 4, 4)]
    started = starts(simulate(backlog_and_teammate(None, None), gpus, quotas, "fairshare"))
    assert sum(started[k] < started[99] for k in range(1, 51)) == 48  # B in the last round


def test_the_clock_advances_by_the_users_work_over_the_team_guarantee():
    clock = UserClock()
    # 4 GPUs guaranteed: a 1-GPU hour of work moves the clock 15 minutes
    assert clock.turn("vision", "ann", 0.0, HOUR, 4) == 0.0
    assert clock.turn("vision", "ann", 0.0, HOUR, 4) == 900.0
    assert clock.turn("vision", "bob", 60.0, HOUR, 4) == 60.0
    # the same user in another team has a clock of its own
    assert clock.turn("nlp", "ann", 60.0, HOUR, 4) == 60.0
    # idle long enough, the user's turn is the present again
    assert clock.turn("vision", "ann", 10 * HOUR, HOUR, 4) == 10 * HOUR
    # a team with no guarantee: the work itself (as if one GPU)
    assert clock.turn("free", "ann", 0.0, HOUR, 0) == 0.0
    assert clock.turn("free", "ann", 0.0, HOUR, 0) == HOUR
    assert clock.turn("vision", None, 5.0, HOUR, 4) is None


def test_the_live_scheduler_places_the_earliest_turn_first():
    from apps.jobs.scheduler.state import GpuInfo

    gpus = [GpuInfo(0, "n0", "A")]
    quotas = [TeamQuota("vision", "A", 1, 1)]
    older = QueuedJob(1, "vision", None, 1, HOUR, 0.0, turn=7200.0)
    newer = QueuedJob(2, "vision", None, 1, HOUR, 60.0)
    decision = schedule(ClusterState(100.0, gpus, [older, newer], quotas=quotas))
    assert [p.job_id for p in decision.placements] == [2]
    assert newer.queued_since == 60.0 and older.queued_since == 7200.0


def test_generic_traces_carry_a_user_column(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("submit,duration,gpus,team,user\n0,60,1,vision,ann\n5,60,1,vision,\n")
    jobs = load_generic(path).jobs
    assert [j.user for j in jobs] == ["ann", None]
    renamed = load_generic(path, user="team").jobs
    assert [j.user for j in renamed] == ["vision", "vision"]


def test_a_trace_without_a_user_column_loads_without_users(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("submit,duration,gpus,team\n0,60,1,vision\n")
    assert load_generic(path).jobs[0].user is None
    path.write_text("submit,gpus,team\n0,1,vision\n")
    with pytest.raises(TraceError, match="duration"):
        load_generic(path)


def test_the_synthetic_trace_has_users_per_team_and_the_same_jobs():
    jobs, summary = generate(jobs=3000, days=10, seed=5)
    teams = {j.team for j in jobs}
    per_team = {t: {j.user for j in jobs if j.team == t} for t in teams}
    assert all(j.user and j.user.startswith(j.team) for j in jobs)
    assert summary["users"] == sum(len(u) for u in per_team.values())
    assert max(len(u) for u in per_team.values()) > 3
    again, _ = generate(jobs=3000, days=10, seed=5)
    assert [(j.job_id, j.submit, j.user) for j in again] == [
        (j.job_id, j.submit, j.user) for j in jobs
    ]
