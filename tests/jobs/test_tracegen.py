"""The synthetic benchmark trace includes small teams: a few jobs each, up to 8 GPUs, in one
burst, which is where a guarantee that does not come back shows."""

from collections import defaultdict

import pytest

from bench.tracegen import generate


def test_small_teams_have_3_to_30_jobs_of_up_to_8_gpus_in_one_burst():
    jobs, summary = generate(jobs=3000, days=14, seed=5)
    assert len(jobs) == 3000 and len({j.job_id for j in jobs}) == 3000
    by_team = defaultdict(list)
    for job in jobs:
        by_team[job.team].append(job)
    assert len(by_team) == 15 and len(summary["small_teams"]) == 3
    small = {team: by_team[team] for team in summary["small_teams"]}
    for team_jobs in small.values():
        assert 3 <= len(team_jobs) <= 30
        assert all(1 <= j.gpus <= 8 for j in team_jobs)
        submits = [j.submit for j in team_jobs]
        assert max(submits) - min(submits) <= 2 * 3600
    # the big teams keep the load and the multi-node tail
    assert max(j.gpus for j in jobs) > 8 and 0.6 < summary["avg_offered_load"] < 0.9


def test_same_seed_same_trace_and_small_teams_can_be_left_out():
    assert generate(jobs=500, days=7, seed=3) == generate(jobs=500, days=7, seed=3)
    jobs, summary = generate(jobs=500, days=7, seed=3, small_teams=0)
    assert summary["small_teams"] == {} and len({j.team for j in jobs}) == 15
    with pytest.raises(ValueError, match="small_teams"):
        generate(jobs=500, teams=3, small_teams=3)
