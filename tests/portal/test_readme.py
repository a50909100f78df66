"""The README's opening says what the portal does today."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_readme_opening_describes_jobs_chargeback_and_dashboards_as_there():
    opening = README.read_text().split("## ", 1)[0].lower()
    assert "next stage" not in opening
    for feature in ("jobs", "scheduler", "chargeback", "focus", "dashboards", "what-if"):
        assert feature in opening, feature


def test_the_replay_example_runs_as_written_without_production_secrets():
    """The README's replay command, as a newcomer pastes it (production settings, no secret
    key, no allowed hosts), replays the sample trace that ships with the repository."""
    text = README.read_text()
    block = re.search(r"### Replaying a trace\n\n```sh\n(.*?)```", text, re.S).group(1)
    command = shlex.split(block.replace("\\\n", " "))
    assert command[:3] == [".venv/bin/python", "manage.py", "replay_trace"]
    assert (ROOT / command[3]).is_file()
    out = ROOT / command[command.index("--out") + 1]
    (out / "replay.json").unlink(missing_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_", "TEST_DATABASE")) and k != "REDIS_URL"
    }
    result = subprocess.run(
        [sys.executable, *command[1:]], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "avg wait (h)" in result.stdout
    report = json.loads((out / "replay.json").read_text())
    assert report  # the policy and its FIFO baseline, per team
    assert "LS" in result.stdout and "BE" in result.stdout  # the sample's QoS classes as teams
