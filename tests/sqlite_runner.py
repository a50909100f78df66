"""Run a scenario module in a subprocess against a fresh SQLite database (the demo's engine),
so SQLite paths are exercised for real while the rest of the suite runs on PostgreSQL."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_on_sqlite(module: str, database: Path) -> dict:
    """`python -m module` with DATABASE_URL pointing at `database`; its last line, as JSON."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": f"sqlite:///{database}",
    }
    result = subprocess.run(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
