import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_jobs_lifecycle_works_on_sqlite(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'jobs.sqlite3'}",
    }
    result = subprocess.run(
        [sys.executable, "-m", "tests.jobs.sqlite_cycle"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
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
