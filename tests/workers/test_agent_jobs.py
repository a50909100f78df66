"""The node agent's job runner with real subprocesses: launch, duplicate, kill, max runtime."""

import sys
import threading
import time
from pathlib import Path

import pytest

from workers.agent.jobs import JobRunner
from workers.agent.nvml import NvmlReader
from workers.agent.simulated import SimulatedNvml


class Reports:
    def __init__(self):
        self.items: list[dict] = []
        self.finished = threading.Event()

    def __call__(self, payload: dict) -> None:
        self.items.append(payload)
        if payload["event"] == "finished":
            self.finished.set()

    def events(self) -> list[str]:
        return [p["event"] for p in self.items]

    def last(self) -> dict:
        assert self.finished.wait(30), f"no finished report: {self.items}"
        return self.items[-1]


def _spec(job_id=1, attempt=1, argv=None, **extra) -> dict:
    return {
        "job_id": job_id,
        "attempt": attempt,
        "argv": argv or [sys.executable, "-c", "print('hello')"],
        "env": {},
        "gpu_uuids": ["GPU-a", "GPU-b"],
        "max_runtime_seconds": 60,
        "grace_seconds": 1,
        **extra,
    }


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def reports():
    return Reports()


@pytest.fixture
def runner(tmp_path, reports):
    loads: dict = {}
    runner = JobRunner(
        hostname="n1",
        report=reports,
        log_dir=tmp_path,
        simulated=True,
        run_commands=True,
        set_load=lambda uuid, util: loads.__setitem__(uuid, util),
    )
    runner.loads = loads
    yield runner
    runner.stop_all()


def test_launch_runs_argv_with_its_gpus_and_reports_exit_code(runner, reports):
    script = (
        "import os, sys; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['X']); sys.exit(3)"
    )
    assert (
        runner.launch(_spec(argv=[sys.executable, "-c", script], env={"X": "a b; rm -rf /"}))
        == "started"
    )
    last = reports.last()
    assert reports.events() == ["started", "finished"]
    assert last["exit_code"] == 3
    assert "GPU-a,GPU-b a b; rm -rf /" in last["log_tail"]  # env passed verbatim, no shell
    assert runner.loads == {"GPU-a": None, "GPU-b": None}  # load released at the end


def test_duplicate_launch_does_not_start_twice(runner, reports, tmp_path):
    marker = tmp_path / "count"
    script = f"open({str(marker)!r}, 'a').write('x')"
    spec = _spec(argv=[sys.executable, "-c", script])
    assert runner.launch(spec) == "started"
    assert runner.launch(spec) == "duplicate"
    reports.last()
    # A restarted agent (new runner, same log folder) also refuses the redelivery.
    again = JobRunner(hostname="n1", report=reports, log_dir=tmp_path)
    assert again.launch(spec) == "duplicate"
    assert marker.read_text() == "x"
    assert reports.events().count("started") == 1


def test_next_attempt_runs_again(runner, reports):
    runner.launch(_spec(attempt=1))
    reports.last()
    reports.finished.clear()
    assert runner.launch(_spec(attempt=2)) == "started"
    assert reports.last()["attempt"] == 2


def test_kill_stops_the_whole_process_group(runner, reports, tmp_path):
    # The job starts a child; SIGTERM goes to the whole group.
    script = (
        "import subprocess, sys, time;"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']);"
        "print('child', child.pid, flush=True); time.sleep(300)"
    )
    runner.launch(_spec(argv=[sys.executable, "-c", script]))
    log = runner.log_dir / "job-1-1-r0.log"
    for _ in range(100):
        if "child" in log.read_text():
            break
        time.sleep(0.05)
    child = int(log.read_text().split()[1])
    assert _alive(child)
    assert runner.kill(1, 1, grace_seconds=1) == "killing"
    last = reports.last()
    assert last["exit_code"] == -15
    assert last["stopped"] == "kill"
    assert runner.running == {}
    for _ in range(100):
        if not _alive(child):
            break
        time.sleep(0.05)
    assert not _alive(child)


def test_kill_escalates_to_sigkill_after_grace(runner, reports):
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "print('ignoring', flush=True); time.sleep(300)"
    )
    runner.launch(_spec(argv=[sys.executable, "-c", script]))
    for _ in range(50):  # wait until the handler is installed
        if "ignoring" in (runner.log_dir / "job-1-1-r0.log").read_text():
            break
        time.sleep(0.1)
    runner.kill(1, 1, grace_seconds=0.5)
    assert reports.last()["exit_code"] == -9


def test_kill_of_unknown_job_reports_it_finished_and_blocks_a_late_launch(runner, reports):
    assert runner.kill(99, 1) == "not running"
    assert runner.launch(_spec(job_id=99, attempt=1)) == "duplicate"
    assert reports.items == [
        {
            "job_id": 99,
            "attempt": 1,
            "rank": 0,
            "event": "finished",
            "node": "n1",
            "exit_code": None,
            "stopped": "kill",
        }
    ]


def test_max_runtime_is_enforced(runner, reports):
    runner.launch(_spec(argv=["sleep", "300"], max_runtime_seconds=1, grace_seconds=1))
    last = reports.last()
    assert last["stopped"] == "max runtime"
    assert last["exit_code"] == -15
    assert "maximum runtime reached" in last["log_tail"]


def test_missing_program_reports_127(runner, reports):
    assert runner.launch(_spec(argv=["/nonexistent/program"])) == "failed"
    last = reports.last()
    assert last["exit_code"] == 127
    assert "could not start" in last["log_tail"]


def test_simulated_job_sleeps_and_loads_its_gpus(runner, reports):
    runner.run_commands = False  # a simulated node's default: train.py does not exist here
    spec = _spec(argv=["train.py"], env={"SIMULATED_DURATION": "0.2", "SIMULATED_EXIT_CODE": "0"})
    assert runner.launch(spec) == "started"
    assert runner.loads == {"GPU-a": 95.0, "GPU-b": 95.0} or reports.finished.is_set()
    last = reports.last()
    assert last["exit_code"] == 0
    assert "simulated job done" in last["log_tail"]


def test_simulated_job_runs_real_command_when_asked(runner, reports):
    runner.run_commands = False
    script = "print('real command')"
    spec = _spec(argv=[sys.executable, "-c", script], env={"SIMULATED_RUN": "command"})
    runner.launch(spec)
    assert "real command" in reports.last()["log_tail"]


def test_each_rank_of_a_multi_node_job_gets_its_rendezvous_environment(runner, reports):
    names = ("PORTAL_JOB_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")
    script = f"import os; print('|'.join(os.environ[n] for n in {names!r}))"
    spec = _spec(
        argv=[sys.executable, "-c", script],
        rank=1,
        ranks=2,
        world_size=2,
        master_addr="gpu-node-07",
        master_port=29517,
        gpu_uuids=["GPU-c", "GPU-d"],
    )
    assert runner.launch(spec) == "started"
    last = reports.last()
    assert last["rank"] == 1
    assert "1|2|gpu-node-07|29517|GPU-c,GPU-d" in last["log_tail"]


def test_simulated_job_sets_the_sm_activity_of_its_gpus_on_a_simulated_node(tmp_path, reports):
    sim = SimulatedNvml("n1", gpu_count=2)
    reader = NvmlReader(sim)
    runner = JobRunner(
        hostname="n1",
        report=reports,
        log_dir=tmp_path,
        simulated=True,
        run_commands=False,
        set_load=sim.set_load,
    )
    try:
        env = {"SIMULATED_DURATION": "30", "SIMULATED_UTIL": "100", "SIMULATED_SM_ACTIVE": "2"}
        spec = _spec(argv=["train.py"], env=env, gpu_uuids=sim.gpu_uuids[:1])
        reader.sample()
        assert runner.launch(spec) == "started"
        time.sleep(0.3)
        busy, untouched = reader.sample()
        assert busy["util_gpu"] >= 95 and busy["sm_active"] == pytest.approx(2, abs=0.5)
        assert untouched["sm_active"] == pytest.approx(0, abs=0.5)
    finally:
        runner.stop_all()
        reader.close()
