"""Reports from node agents: a job's attempt started or finished on a node."""

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.jobs import messaging
from apps.jobs.choices import ACTIVE_STATUSES, FINISHED_STATUSES, JobStatus
from apps.jobs.models import Job
from apps.jobs.services.allocations import close_allocations, job_hostnames, release_allocations
from apps.jobs.services.requeue import requeue_attempt, stop_broken_gang
from apps.jobs.transitions import job_transition
from portal.pg_text import storable, text_problem

logger = logging.getLogger(__name__)

LOG_TAIL_CHARS = 16_000


def job_report(*, report: dict, now: datetime | None = None) -> str:
    """Apply a report from a node agent: {"job_id", "attempt", "event": "started"|"finished",
    "exit_code", "log_tail", "node", "rank"}. Reports for unknown jobs, other attempts,
    finished jobs or secondary ranks are ignored and logged. Returns what was done."""
    now = now or timezone.now()
    try:
        job_id = int(report["job_id"])
        attempt = int(report.get("attempt", 1))
        event = str(report["event"])
        if isinstance(report.get("node"), str) and text_problem(report["node"]):
            raise ValueError("a node name PostgreSQL cannot store")
    except (KeyError, TypeError, ValueError):
        logger.warning("ignored malformed job report %r", report)
        return "ignored"
    with transaction.atomic():
        if event == "finished" and isinstance(report.get("node"), str):
            # Whatever became of the job meanwhile (cancelled, requeued, a secondary rank), the
            # node no longer runs this attempt: its GPUs are free once the job closed them.
            release_allocations(job_id=job_id, attempt=attempt, hostname=report["node"], now=now)
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            logger.warning("ignored %s report for unknown job %s", event, job_id)
            return "ignored"
        if attempt != job.attempt or job.status in FINISHED_STATUSES:
            logger.info(
                "ignored %s report for job %s attempt %s (job is %s, attempt %s)",
                event,
                job_id,
                attempt,
                job.status,
                job.attempt,
            )
            return "ignored"
        if int(report.get("rank", 0)) != 0:
            return _secondary_rank_report(job, report, event, now=now)
        hostnames = job_hostnames(job)
        if report.get("node") and report["node"] not in hostnames:
            logger.warning(
                "ignored %s report for job %s from %s: it runs on %s",
                event,
                job_id,
                report["node"],
                hostnames or "no node",
            )
            return "ignored"
        if "log_tail" in report and isinstance(report["log_tail"], str):
            # A program's output may hold NUL bytes, which PostgreSQL text refuses: escaped.
            job.log_tail = storable(report["log_tail"][-LOG_TAIL_CHARS:])
        if event == "started":
            if job.status != JobStatus.DISPATCHED:
                job.save(update_fields=["log_tail"])
                return "ignored"
            fields = job_transition(job, JobStatus.RUNNING, at=now)
            job.save(update_fields=[*fields, "log_tail"])
            return "running"
        if event != "finished":
            logger.warning("ignored unknown job event %r", event)
            return "ignored"
        exit_code = report.get("exit_code")
        job.exit_code = exit_code if isinstance(exit_code, int) else None
        secondary = hostnames[1:]
        close_allocations(job, now=now)
        if secondary:
            messaging.kill_on_commit(job, secondary, settings.JOBS_KILL_GRACE_SECONDS)
        if job.status == JobStatus.PREEMPTED:
            requeue_attempt(job, now=now, reason="preempted", counted=False)
        elif job.status in ACTIVE_STATUSES:
            ended = JobStatus.SUCCEEDED if job.exit_code == 0 else JobStatus.FAILED
            job_transition(job, ended, at=now)
            job.save()
        else:  # queued/requeued: a late report of a stopped attempt
            job.save(update_fields=["log_tail", "exit_code"])
            return "ignored"
        messaging.trigger_schedule()
        return job.status


def _secondary_rank_report(job: Job, report: dict, event: str, *, now: datetime) -> str:
    """A node other than rank 0 reports. Its "finished" with a failure (non-zero exit, or no
    exit code: it could not launch or was killed) while the job is active breaks the gang:
    the other ranks would hang in their collectives, so the whole job is stopped."""
    exit_code = report.get("exit_code")
    if event != "finished" or job.status not in ACTIVE_STATUSES or exit_code == 0:
        return "ignored"
    rank = report.get("rank")
    return stop_broken_gang(
        job, now=now, reason=f"rank {rank} on {report.get('node') or 'its node'} ended "
        f"(exit code {exit_code})"
    )  # fmt: skip
