"""The demo's processes (Procfile.demo under honcho): one that dies is started again while the
others keep running, and Ctrl-C still stops them all."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HONCHO = Path(sys.executable).with_name("honcho")

# Records its pid in NAME.pids, then dies (SIGKILL, as the OOM killer does) for its first DIES
# starts and otherwise stays up.
PROCESS = """
import os, pathlib, signal, sys, time
name, dies = sys.argv[1], int(sys.argv[2])
pids = pathlib.Path(sys.argv[3], name + ".pids")
with pids.open("a") as record:
    record.write(f"{os.getpid()}\\n")
if len(pids.read_text().split()) <= dies:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(600)
"""


def pids(folder: Path, name: str) -> list[int]:
    path = folder / f"{name}.pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


def wait_for(condition, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_every_demo_process_is_kept_running():
    lines = (ROOT / "Procfile.demo").read_text().splitlines()
    assert lines
    for line in lines:
        name, command = line.split(": ", 1)
        assert f" scripts/keep-running {name} " in f" {command}", name


@pytest.mark.slow
def test_a_process_that_dies_is_started_again_and_the_others_keep_running(tmp_path):
    script = tmp_path / "process.py"
    script.write_text(PROCESS)
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        f"crashy: scripts/keep-running crashy {sys.executable} {script} crashy 2 {tmp_path}\n"
        f"steady: scripts/keep-running steady {sys.executable} {script} steady 0 {tmp_path}\n"
    )
    with (tmp_path / "honcho.log").open("w") as log:
        honcho = subprocess.Popen(
            [str(HONCHO), "start", "-f", str(procfile), "-d", str(ROOT)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # Killed twice, started a third time; the other process is never touched.
        assert wait_for(lambda: len(pids(tmp_path, "crashy")) == 3), tmp_path / "honcho.log"
        assert wait_for(lambda: alive(pids(tmp_path, "crashy")[-1]))
        assert honcho.poll() is None
        assert len(pids(tmp_path, "steady")) == 1 and alive(pids(tmp_path, "steady")[0])
        log = (tmp_path / "honcho.log").read_text()
        assert "keep-running: crashy exited with status 137; starting it again" in log

        honcho.send_signal(signal.SIGINT)  # Ctrl-C
        assert honcho.wait(timeout=60) is not None
    finally:
        if honcho.poll() is None:
            os.killpg(honcho.pid, signal.SIGKILL)
    running = [pids(tmp_path, "crashy")[-1], pids(tmp_path, "steady")[0]]
    assert wait_for(lambda: not any(alive(pid) for pid in running), seconds=30)
    assert len(pids(tmp_path, "crashy")) == 3  # nothing started again after the stop
