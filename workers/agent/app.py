"""Celery app of the node agent. Configured from the environment only; no Django, no database."""

import logging
import os
import socket
from pathlib import Path

from celery import Celery
from celery.signals import worker_ready

from workers.agent.agent import Agent
from workers.agent.backends import make_reader
from workers.agent.jobs import JobRunner
from workers.agent.simulated_power import SimulatedPower
from workers.broker import is_embedded, transport_options
from workers.protocol import (
    DEFAULT_TELEMETRY_QUEUE,
    INGEST_TASK,
    JOB_REPORT_TASK,
    KILL_TASK,
    LAUNCH_TASK,
    PING_TASK,
    POLL_TASK,
    PORTAL_QUEUE,
    node_queue,
)

BACKENDS = ("real", "simulated")
# Batches wait here until the portal drains many of them into one transaction.
TELEMETRY_QUEUE = os.environ.get("TELEMETRY_QUEUE", DEFAULT_TELEMETRY_QUEUE)
logger = logging.getLogger(__name__)


def broker_url() -> str:
    url = os.environ.get("CELERY_BROKER_URL") or os.environ.get("REDIS_URL")
    if not url:
        raise SystemExit(
            "The node agent needs CELERY_BROKER_URL (or REDIS_URL) pointing at the portal's broker."
        )
    return url


def _transport_options(url: str) -> dict:
    if not is_embedded(url):
        return {"visibility_timeout": 3600}
    # The demo's embedded broker: the same folders the portal uses (AGENT_BROKER_DIR).
    return transport_options(Path(os.environ.get("AGENT_BROKER_DIR", "var/broker")))


def create_app(
    *,
    hostname: str | None = None,
    backend: str = "simulated",
    run_commands: bool = False,
    **simulated_options,
) -> Celery:
    hostname = hostname or socket.gethostname()
    url = broker_url()
    app = Celery("gpu_agent", broker=url)
    app.conf.update(
        broker_transport_options=_transport_options(url),
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=node_queue(hostname),
        task_time_limit=120,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )

    def send(task_name: str, payload: dict) -> None:
        queue = TELEMETRY_QUEUE if task_name == INGEST_TASK else PORTAL_QUEUE
        app.send_task(task_name, args=[payload], queue=queue, retry=False)

    agent = Agent(
        hostname=hostname,
        backend=backend,
        reader=make_reader(backend, hostname, **simulated_options),
        send=send,
        power=SimulatedPower.from_env(hostname) if backend == "simulated" else None,
    )
    app.conf.agent = agent
    nvml = agent.reader.nvml
    runner = JobRunner(
        hostname=hostname,
        report=lambda payload: send(JOB_REPORT_TASK, payload),
        log_dir=Path(os.environ.get("AGENT_JOB_DIR", "var/agent-jobs")) / hostname,
        simulated=backend == "simulated",
        run_commands=run_commands,
        set_load=getattr(nvml, "set_load", None) if backend == "simulated" else None,
    )
    app.conf.job_runner = runner

    @app.task(name=LAUNCH_TASK)
    def launch(spec: dict) -> str:
        """Start a job attempt on this node's GPUs (a duplicate delivery is ignored)."""
        return runner.launch(spec)

    @app.task(name=KILL_TASK)
    def kill(job_id: int, attempt: int, grace_seconds: float | None = None) -> str:
        """Stop a job attempt: SIGTERM to its process group, SIGKILL after the grace period."""
        return runner.kill(job_id, attempt, grace_seconds)

    @app.task(name=PING_TASK)
    def ping() -> dict:
        """Liveness probe: which node answered and with which NVML backend."""
        return {"hostname": hostname, "backend": backend}

    @app.task(name=POLL_TASK, acks_late=False)
    def poll() -> dict:
        """Read the GPUs and send one batch. Not acked late: a poll lost with a dying agent is
        simply the next poll's job, never worth repeating."""
        return agent.poll()

    @worker_ready.connect(weak=False)
    def register(sender=None, **kwargs) -> None:
        try:
            agent.register()
        except Exception:  # noqa: BLE001 - the next start or poll cycle registers again
            logger.exception("could not register %s with the portal", hostname)

    return app
