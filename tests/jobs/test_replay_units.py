"""Replaying with organisation units: the quota file's parent column and unit rows, the same
rule as live (a unit's limit caps its teams' borrowing), and the figures per unit."""

from __future__ import annotations

import pytest

from apps.jobs.scheduler.quota_file import QuotaFileError, load_quota_file
from apps.jobs.scheduler.replay import JOB_COLUMNS, TraceJob, simulate
from apps.jobs.scheduler.team_metrics import format_team_metrics, team_metrics
from apps.jobs.scheduler.trace import parse_fleet
from apps.teams.quota_rule import UnitQuotaRow

NESTED = """team,model,guaranteed,limit,parent
research,A,4,5,
vision,A,2,8,research
nlp,A,2,8,research
ops,,,,
sre,A,0,8,ops
"""


def write(tmp_path, text: str):
    path = tmp_path / "quotas.csv"
    path.write_text(text)
    return path


def test_the_parent_column_makes_units_and_places_teams(tmp_path):
    teams, units = load_quota_file(write(tmp_path, NESTED))
    assert [q.team for q in teams] == ["vision", "nlp", "sre"]
    assert units.rows == [UnitQuotaRow("research", "A", 4, 5)]
    assert units.tree.teams_under("research") == {"vision", "nlp"}
    assert units.tree.team_path("sre") == ["ops"]


def test_a_flat_file_has_no_units(tmp_path):
    teams, units = load_quota_file(write(tmp_path, "team,model,guaranteed,limit\na,A,1,2\n"))
    assert units is None and teams[0].limit == 2


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("team,model,guaranteed,limit,parent\na,A,1,2,u\na,A,1,2,v\nu,,,,\nv,,,,\n", "under u"),
        ("team,model,guaranteed,limit,parent\nu,,,,v\nv,,,,u\na,A,1,2,u\n", "cycle"),
        ("team,model,guaranteed,limit,parent\na,A,3,2,\n", "0 <= guaranteed <= limit"),
        ("team,model,guaranteed,limit,parent\na,A,1,,\n", "both guaranteed and limit"),
        ("team,model,guaranteed,limit,parent\na,A,x,2,\n", "whole number"),
        ("team,model,limit\na,A,2\n", "lacks the column(s) guaranteed"),
        ("team,model,guaranteed,limit,parent\na,A,1,2,a\n", "its own parent"),
    ],
)
def test_a_bad_quota_file_says_which_line_and_why(tmp_path, text, says):
    with pytest.raises(
        QuotaFileError, match=r"(?s).*" + says.replace("(", r"\(").replace(")", r"\)")
    ):
        load_quota_file(write(tmp_path, text))


def test_a_replay_applies_the_units_limit_and_reports_per_unit(tmp_path):
    teams, units = load_quota_file(write(tmp_path, NESTED))
    gpus = parse_fleet("1x8:A")
    # vision and nlp each borrow 3 at once: research may hold 5 together
    jobs = [TraceJob(1, 0, 3600, 3, "vision"), TraceJob(2, 0, 3600, 3, "nlp")]
    at = {name: k for k, name in enumerate(JOB_COLUMNS)}
    flat = {r[0]: r for r in simulate(jobs, gpus, teams, "fairshare").job_rows}
    nested_result = simulate(jobs, gpus, teams, "fairshare", units=units)
    nested = {r[0]: r for r in nested_result.job_rows}
    assert flat[1][at["first_start"]] == flat[2][at["first_start"]] == 0
    assert sorted(nested[k][at["first_start"]] for k in (1, 2)) == [0, 3600]
    metrics = team_metrics(nested_result, teams, units)
    research = metrics.units["research"]
    assert research.teams == ("nlp", "vision") and research.jobs == 2
    assert metrics.units["ops"].jobs == 0
    assert "research" in format_team_metrics({"fairshare": metrics})
    assert metrics.as_dict()["units"]["research"]["jobs"] == 2
