"""Running portal jobs on this node: launch, watch, enforce the max runtime, kill, report.

Free of Celery and Django (tested directly); `workers.agent.app` wires it to the broker. A job
attempt's log file is created exclusively, so a redelivered `launch` (or one that arrives again
after the agent restarted) never starts the process twice.
"""

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

LOG_TAIL_BYTES = 8000
# Simulated nodes run a job as a timed sleep of this many seconds (job environment; default
# DEFAULT_SIMULATED_SECONDS) unless the agent runs real commands or the job sets
# SIMULATED_RUN=command ...
SIMULATED_DURATION = "SIMULATED_DURATION"
SIMULATED_RUN = "SIMULATED_RUN"
DEFAULT_SIMULATED_SECONDS = 60.0
# ... exiting with this code (default 0).
SIMULATED_EXIT_CODE = "SIMULATED_EXIT_CODE"
# Load (GPU util %) a simulated job puts on its GPUs (default 95)...
SIMULATED_UTIL = "SIMULATED_UTIL"
# ... and the SM activity (%) GPUs with GPM metrics report for it (default: follows the load;
# a job of tiny kernels: SIMULATED_UTIL=100, SIMULATED_SM_ACTIVE=2).
SIMULATED_SM_ACTIVE = "SIMULATED_SM_ACTIVE"

Report = Callable[[dict], None]


@dataclass
class RunningProcess:
    job_id: int
    attempt: int
    rank: int
    process: subprocess.Popen
    log_path: Path
    gpu_uuids: list[str]
    grace_seconds: float
    stop_requested: threading.Event = field(default_factory=threading.Event)
    killed_by: str = ""


def log_tail(path: Path, size: int = LOG_TAIL_BYTES) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - size))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class JobRunner:
    """Starts job processes in their own process group with CUDA_VISIBLE_DEVICES set to the
    job's GPUs, stdout+stderr to `<log_dir>/job-<id>-<attempt>-r<rank>.log`, and reports
    `started`/`finished` (exit code, log tail) through `report(payload)`.

    On simulated nodes a job is a timed sleep (see SIMULATED_DURATION) unless `run_commands`
    or the job asks for its real command; `set_load` makes the fake GPUs busy meanwhile."""

    def __init__(
        self,
        *,
        hostname: str,
        report: Report,
        log_dir: Path,
        simulated: bool = False,
        run_commands: bool = False,
        set_load: Callable[..., None] | None = None,
        report_retries: int = 5,
    ) -> None:
        self.hostname = hostname
        self.report = report
        self.log_dir = Path(log_dir)  # created on the first launch or kill
        self.simulated = simulated
        self.run_commands = run_commands
        self.set_load = set_load
        self.report_retries = report_retries
        self.running: dict[tuple[int, int], RunningProcess] = {}
        self.lock = threading.Lock()

    # --- launch --------------------------------------------------------------------------------

    def _command(self, spec: dict) -> list[str]:
        env = spec.get("env") or {}
        if self.simulated and not self.run_commands and env.get(SIMULATED_RUN) != "command":
            seconds = float(env.get(SIMULATED_DURATION, DEFAULT_SIMULATED_SECONDS))
            code = int(env.get(SIMULATED_EXIT_CODE, "0"))
            script = (
                "import sys, time; print('simulated job running', flush=True); "
                f"time.sleep({seconds!r}); print('simulated job done', flush=True); "
                f"sys.exit({code})"
            )
            return [sys.executable, "-c", script]
        return [str(arg) for arg in spec["argv"]]

    def _environment(self, spec: dict) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "REDIS_"))}
        env.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
        env["CUDA_VISIBLE_DEVICES"] = ",".join(spec.get("gpu_uuids") or [])
        env["PORTAL_JOB_ID"] = str(spec["job_id"])
        env["PORTAL_JOB_ATTEMPT"] = str(spec.get("attempt", 1))
        env["PORTAL_JOB_RANK"] = str(spec.get("rank", 0))
        # Rendezvous of a multi-node job (torchrun --nnodes=$WORLD_SIZE
        # --node_rank=$PORTAL_JOB_RANK --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT):
        # one launcher per node, WORLD_SIZE counts the nodes of the gang.
        env["WORLD_SIZE"] = str(spec.get("world_size") or spec.get("ranks") or 1)
        env["MASTER_ADDR"] = str(spec.get("master_addr") or self.hostname)
        env["MASTER_PORT"] = str(spec.get("master_port") or 29500)
        return env

    def launch(self, spec: dict) -> str:
        """Start the job attempt unless it was already launched here. Returns "started",
        "duplicate" or "failed" (could not start: reported finished with exit code 127)."""
        job_id, attempt = int(spec["job_id"]), int(spec.get("attempt", 1))
        rank = int(spec.get("rank", 0))
        log_path = self.log_dir / f"job-{job_id}-{attempt}-r{rank}.log"
        with self.lock:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            if self._killed_marker(job_id, attempt).exists():
                logger.info(
                    "job %s attempt %s was killed before it started; ignored", job_id, attempt
                )
                return "duplicate"
            try:
                log = log_path.open("xb")  # exclusive: the launch marker of this attempt
            except FileExistsError:
                logger.info("job %s attempt %s already launched here; ignored", job_id, attempt)
                return "duplicate"
            try:
                process = subprocess.Popen(
                    self._command(spec),
                    cwd=spec.get("workdir") or None,
                    env=self._environment(spec),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: kill reaches children
                    shell=False,
                )
            except (OSError, ValueError) as error:
                log.write(f"could not start the job: {error}\n".encode())
                log.close()
                self._report(job_id, attempt, rank, "finished", exit_code=127, log_path=log_path)
                return "failed"
            finally:
                if not log.closed:
                    log.close()
            record = RunningProcess(
                job_id=job_id,
                attempt=attempt,
                rank=rank,
                process=process,
                log_path=log_path,
                gpu_uuids=list(spec.get("gpu_uuids") or []),
                grace_seconds=float(spec.get("grace_seconds", 30)),
            )
            self.running[(job_id, attempt)] = record
        env = spec.get("env") or {}
        self._load(record, float(env.get(SIMULATED_UTIL, 95)), env.get(SIMULATED_SM_ACTIVE))
        self._report(job_id, attempt, rank, "started", log_path=log_path)
        threading.Thread(
            target=self._watch,
            args=(record, float(spec.get("max_runtime_seconds") or 0)),
            name=f"job-{job_id}-{attempt}",
            daemon=True,
        ).start()
        return "started"

    def _watch(self, record: RunningProcess, max_runtime: float) -> None:
        try:
            record.process.wait(timeout=max_runtime or None)
        except subprocess.TimeoutExpired:
            record.killed_by = "max runtime"
            with record.log_path.open("ab") as log:
                log.write(b"\n[portal] maximum runtime reached; stopping the job\n")
            self._terminate(record)
        code = record.process.wait()
        self._load(record, None)
        with self.lock:
            self.running.pop((record.job_id, record.attempt), None)
        self._report(
            record.job_id,
            record.attempt,
            record.rank,
            "finished",
            exit_code=code,
            log_path=record.log_path,
            stopped=record.killed_by,
        )

    # --- kill ----------------------------------------------------------------------------------

    def _signal(self, record: RunningProcess, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.process.pid, sig)

    def _terminate(self, record: RunningProcess) -> None:
        """SIGTERM to the process group, SIGKILL after the grace period."""
        self._signal(record, signal.SIGTERM)
        try:
            record.process.wait(timeout=record.grace_seconds)
        except subprocess.TimeoutExpired:
            self._signal(record, signal.SIGKILL)

    def kill(self, job_id: int, attempt: int, grace_seconds: float | None = None) -> str:
        """Stop a job attempt (its whole process group). Returns "killing", or "not running"
        after reporting it finished so the portal never waits on a job this node lacks."""
        with self.lock:
            record = self.running.get((int(job_id), int(attempt)))
        if record is None:
            # A launch still on its way (or redelivered later) must not start it after this.
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._killed_marker(int(job_id), int(attempt)).touch()
            self._report(int(job_id), int(attempt), 0, "finished", exit_code=None, stopped="kill")
            return "not running"
        if grace_seconds is not None:
            record.grace_seconds = float(grace_seconds)
        record.killed_by = record.killed_by or "kill"
        threading.Thread(target=self._terminate, args=(record,), daemon=True).start()
        return "killing"

    def stop_all(self) -> None:
        with self.lock:
            records = list(self.running.values())
        for record in records:
            record.grace_seconds = min(record.grace_seconds, 5)
            self._terminate(record)

    # --- helpers -------------------------------------------------------------------------------

    def _killed_marker(self, job_id: int, attempt: int) -> Path:
        return self.log_dir / f"job-{job_id}-{attempt}.killed"

    def _load(self, record: RunningProcess, util: float | None, sm_active=None) -> None:
        if self.set_load is None:
            return
        for uuid in record.gpu_uuids:
            try:
                if sm_active is None:
                    self.set_load(uuid, util)
                else:
                    self.set_load(uuid, util, sm_active=float(sm_active))
            except Exception:  # noqa: BLE001 - a GPU this simulator lacks: no load to show
                logger.debug("no simulated GPU %s", uuid)

    def _report(
        self,
        job_id: int,
        attempt: int,
        rank: int,
        event: str,
        *,
        exit_code: int | None = None,
        log_path: Path | None = None,
        stopped: str = "",
    ) -> None:
        payload: dict[str, Any] = {
            "job_id": job_id,
            "attempt": attempt,
            "rank": rank,
            "event": event,
            "node": self.hostname,
        }
        if event == "finished":
            payload["exit_code"] = exit_code
            payload["stopped"] = stopped
        if log_path is not None:
            payload["log_tail"] = log_tail(log_path)
        for attempt_no in range(self.report_retries):
            try:
                self.report(payload)
                return
            except Exception:  # noqa: BLE001 - broker down: retry, then give up loudly
                logger.warning("cannot report job %s %s; retrying", job_id, event, exc_info=True)
                time.sleep(min(2**attempt_no, 10))
        logger.error("could not report job %s %s to the portal", job_id, event)
