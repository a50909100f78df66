"""Jobs end to end: simulated node agents (separate processes) -> Redis -> portal Celery worker
-> PostgreSQL. Submit -> running -> succeeded; cancel kills the process; a lost node's job is
requeued and finishes on another node."""

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from apps.fleet.models import Gpu, GpuModel
from apps.jobs import services
from apps.jobs.choices import JobStatus
from apps.jobs.dispatch import schedule_cycle
from apps.jobs.models import Job, JobAllocation
from apps.teams.models import Quota
from apps.telemetry.drain import telemetry_drain
from apps.telemetry.models import GpuSample
from apps.telemetry.services import nodes_mark_unreachable
from apps.telemetry.tasks import poll_fleet
from tests.processes import spawn_agent, stop, wait_for

ROOT = Path(__file__).resolve().parents[2]
MARK = "E2E_JOB_MARK"


def _job_pids(mark: str) -> list[int]:
    """Processes started for a job of this test (found by an env marker)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"{MARK}={mark}".encode() in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def _status(job) -> str:
    return Job.objects.get(pk=job.pk).status


@pytest.fixture
def e2e(tmp_path, team, member, settings):
    from celery.contrib.testing.worker import start_worker

    from portal.celery import app

    settings.TELEMETRY_POLL_SECONDS = 1
    app.control.purge()
    agents: dict[str, subprocess.Popen] = {}
    mark = uuid.uuid4().hex

    def start(name: str) -> str:
        hostname = f"jobs-e2e-{os.getpid()}-{name}"
        agents[hostname] = spawn_agent(hostname, job_dir=tmp_path)
        assert wait_for(lambda: Gpu.objects.filter(node__hostname=hostname).count() == 4)
        return hostname

    def submit(seconds: float, count: int = 2) -> Job:
        model = GpuModel.objects.get(name="H100-SXM-80GB")
        Quota.objects.get_or_create(
            team=team, gpu_model=model, defaults={"guaranteed": 8, "limit": 8}
        )
        return services.job_submit(
            actor=member,
            team=team,
            argv=["python", "train.py"],
            gpu_model=model,
            gpu_count=count,
            max_runtime_seconds=600,
            env={"SIMULATED_DURATION": str(seconds), MARK: mark},
        )

    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        try:
            yield start, submit, agents, mark
        finally:
            for process in agents.values():
                stop(process)
            for pid in _job_pids(mark):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_submit_runs_and_succeeds(e2e):
    start, submit, agents, mark = e2e
    hostname = start("a")
    job = submit(1)
    assert wait_for(lambda: _status(job) == JobStatus.SUCCEEDED, poll=schedule_cycle)
    job.refresh_from_db()
    assert job.node.hostname == hostname and job.exit_code == 0
    assert job.started_at and job.finished_at and "simulated job done" in job.log_tail
    assert not JobAllocation.objects.filter(job=job, end__isnull=True).exists()
    assert JobAllocation.objects.filter(job=job).count() == 2


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_cancel_kills_the_running_process(e2e):
    start, submit, agents, mark = e2e
    start("a")
    job = submit(300)
    assert wait_for(lambda: _status(job) == JobStatus.RUNNING, poll=schedule_cycle)
    assert _job_pids(mark), "the job process is not running"
    # The simulated GPUs of the job get busy (the node's profile is idle).
    busy = GpuSample.objects.filter(gpu__job_allocations__job=job, util_gpu__gte=80)
    assert wait_for(busy.exists, poll=lambda: (poll_fleet(), telemetry_drain()))
    services.job_cancel(job=job, actor=job.submitted_by)
    assert wait_for(lambda: not _job_pids(mark)), "the agent did not kill the job"
    assert _status(job) == JobStatus.CANCELLED


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_lost_node_requeues_and_finishes_elsewhere(e2e):
    start, submit, agents, mark = e2e
    start("a")
    start("b")
    job = submit(4, count=4)
    assert wait_for(lambda: _status(job) == JobStatus.RUNNING, poll=schedule_cycle)
    job.refresh_from_db()
    lost = job.node.hostname
    # The node dies with its job: the agent and the job's processes.
    agents.pop(lost).kill()
    for pid in _job_pids(mark):
        os.kill(pid, signal.SIGKILL)
    assert wait_for(
        lambda: Job.objects.get(pk=job.pk).requeue_count == 1,
        poll=lambda: (poll_fleet(), telemetry_drain(), nodes_mark_unreachable()),
    )
    assert wait_for(
        lambda: _status(job) == JobStatus.SUCCEEDED,
        poll=lambda: (poll_fleet(), telemetry_drain(), schedule_cycle()),
    )
    job.refresh_from_db()
    assert job.node.hostname != lost and job.attempt == 2
    attempts = {a.attempt: a for a in JobAllocation.objects.filter(job=job)}
    assert set(attempts) == {1, 2} and all(a.end for a in attempts.values())
    first = JobAllocation.objects.filter(job=job, attempt=1)
    second = JobAllocation.objects.filter(job=job, attempt=2)
    assert max(a.end for a in first) <= min(a.start for a in second)  # never billed twice
