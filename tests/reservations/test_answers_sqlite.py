import pytest

from tests.sqlite_runner import run_on_sqlite


@pytest.mark.slow
def test_booking_answers_work_on_sqlite(tmp_path):
    outcome = run_on_sqlite("tests.reservations.sqlite_answers", tmp_path / "answers.sqlite3")
    assert outcome["vendor"] == "sqlite"
    assert outcome["max_cell"] == 8  # vision's H100 limit in the demo, not the fleet's 16
    assert outcome["first_suggestion_is_typed_start"]
    assert outcome["stranded_alert"]
    assert any(s.endswith("lost 8 GPUs") for s in outcome["mail_subjects"])
    assert "cannot run as Guaranteed" in outcome["refused"]
    assert outcome["api_booked"] == [201, "alice"]
    assert outcome["api_unknown_team"] == [
        400,
        {"team": ["Object with slug=nowhere does not exist."]},
    ]
