import pytest

from tests.sqlite_runner import run_on_sqlite


@pytest.mark.slow
def test_ingest_rollups_and_idle_work_on_sqlite(tmp_path):
    outcome = run_on_sqlite("tests.telemetry.sqlite_pipeline", tmp_path / "telemetry.sqlite3")
    assert outcome["vendor"] == "sqlite"
    assert outcome["stored"] == [4] * 6 and outcome["duplicate"] is True
    assert outcome["resent_stored"] == 0  # samples already stored are skipped, not doubled
    # A poison message is parked once, escaped; delivered again it is a duplicate.
    assert outcome["poison_redelivered"] == [False, True]
    assert outcome["dead_letter_nodes"] == ["probe-\\ud800"]
    assert outcome["samples"] == 24
    assert outcome["minute_rows"] >= 4 and outcome["minute_rollups"] == outcome["minute_rows"]
    assert outcome["hour_rows"] >= 4
    assert outcome["unallocated"] == 4
    # simulated H100s report GPM from their second poll on; the (hour, team, model) sums
    # are written with the hour rollups on SQLite too
    assert outcome["gpm_samples"] == 4 * 5
    assert outcome["team_model_gpu_hours"] == outcome["hour_rows"]
    assert outcome["last_seen_is_agent_stamp"] and outcome["withheld_after_gap"]
    assert outcome["unreachable"] == ["sqlite-node"]
    ((gpu_hours, signal, sm_active),) = outcome["totals"]
    assert gpu_hours == outcome["hour_rows"] and signal == "sm_active"
    assert sm_active == pytest.approx(0.85 * 92, abs=0.5)  # "busy" profile
