import pytest

from tests.sqlite_runner import run_on_sqlite


@pytest.mark.slow
def test_jobs_lifecycle_works_on_sqlite(tmp_path):
    outcome = run_on_sqlite("tests.jobs.sqlite_cycle", tmp_path / "jobs.sqlite3")
    assert outcome == {
        "vendor": "sqlite",
        "placed": True,
        "again": [],
        "requeued": True,
        "status": "succeeded",
        "allocations": 4,
        "open": 0,
        "jobs": 1,
    }
