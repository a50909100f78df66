import pytest

from tests.sqlite_runner import run_on_sqlite


@pytest.mark.slow
def test_month_dashboards_work_on_sqlite(tmp_path):
    outcome = run_on_sqlite("tests.dashboards.sqlite_dashboards", tmp_path / "dash.sqlite3")
    assert outcome["vendor"] == "sqlite"
    # vision: half an H100-hour and a whole L40S-hour busy in each of 48 hours
    assert outcome["busy_gpu_hours"]["vision busy"] == pytest.approx(72, abs=0.1)
    assert outcome["busy_gpu_hours"].get("unallocated busy", 0) == 0
    assert outcome["idle_by_kind"] == [["unallocated", "H100-SXM-80GB", 10.0]]
    assert outcome["idle_traces"] == ["unallocated"]
