import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ingest_rollups_and_idle_work_on_sqlite(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'telemetry.sqlite3'}",
    }
    result = subprocess.run(
        [sys.executable, "-m", "tests.telemetry.sqlite_pipeline"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["vendor"] == "sqlite"
    assert outcome["stored"] == [4] * 6 and outcome["duplicate"] is True
    assert outcome["resent_stored"] == 0  # samples already stored are skipped, not doubled
    assert outcome["samples"] == 24
    assert outcome["minute_rows"] >= 4 and outcome["minute_rollups"] == outcome["minute_rows"]
    assert outcome["hour_rows"] >= 4
    assert outcome["unallocated"] == 4
