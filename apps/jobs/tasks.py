"""Thin Celery tasks of the jobs app; the work is in dispatch and services."""

from celery import shared_task

from apps.jobs import dispatch, services, whatif
from workers.protocol import JOB_REPORT_TASK


@shared_task(name="jobs.schedule", acks_late=False, time_limit=60, soft_time_limit=55)
def schedule() -> dict:
    """One scheduling cycle (beat every few seconds, and after submits and finishes). Not
    acked late: a lost cycle is simply the next one's work."""
    result = dispatch.schedule_cycle()
    return {"locked": result.locked, "placed": result.placed, "preempted": result.preempted}


@shared_task(name=JOB_REPORT_TASK)
def report(payload) -> str:
    """A node agent reports a job `started` or `finished` (exit code, log tail)."""
    return services.job_report(report=payload)


@shared_task(name="jobs.what_if", acks_late=False)
def what_if(run_id: int) -> str:
    """Replay a what-if run the page recorded. Not acked late: a replay cut short is marked
    failed or stays running, and the admin starts another rather than the worker repeating it."""
    return whatif.whatif_run_execute(run_id=run_id)


@shared_task(name="jobs.what_if_sweep", time_limit=60, soft_time_limit=55)
def what_if_sweep() -> list[int]:
    """Beat: mark what-if runs whose worker went silent as failed."""
    return whatif.whatif_runs_fail_stalled()
