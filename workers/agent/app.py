"""Celery app of the node agent. Configured from the environment only; no Django, no database."""

import os
import socket

from celery import Celery

BACKENDS = ("real", "simulated")


def node_queue(hostname: str) -> str:
    return f"node.{hostname}"


def broker_url() -> str:
    url = os.environ.get("CELERY_BROKER_URL") or os.environ.get("REDIS_URL")
    if not url:
        raise SystemExit(
            "The node agent needs CELERY_BROKER_URL (or REDIS_URL) pointing at the portal's broker."
        )
    return url


def create_app(*, hostname: str | None = None, backend: str = "simulated") -> Celery:
    hostname = hostname or socket.gethostname()
    app = Celery("gpu_agent", broker=broker_url())
    app.conf.update(
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
    app.conf.agent_hostname = hostname
    app.conf.agent_backend = backend

    @app.task(name="agent.ping")
    def ping() -> dict:
        """Liveness probe: which node answered and with which NVML backend."""
        return {"hostname": hostname, "backend": backend}

    return app
