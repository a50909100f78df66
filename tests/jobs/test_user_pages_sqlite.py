import pytest

from tests.sqlite_runner import run_on_sqlite


@pytest.mark.slow
def test_queue_gpu_and_team_pages_work_on_sqlite(tmp_path):
    outcome = run_on_sqlite("tests.jobs.sqlite_user_pages", tmp_path / "pages.sqlite3")
    assert outcome["queue_status"] == 200 and outcome["queue_names"] == ["first", "second"]
    assert outcome["teams_rows"] == 8  # the demo's quota rows
    assert outcome["gpu_status"] == 200 and outcome["gpu_points"] == 24
    assert outcome["team_created"] is True
