"""Requeueing a stopped attempt: a lost node, a broken multi-node gang, a lost message.

The attempt number always advances, so reports of the old attempt are ignored.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.fleet.models import Node
from apps.jobs import messaging
from apps.jobs.choices import ACTIVE_STATUSES, JobStatus
from apps.jobs.models import Job, JobAllocation
from apps.jobs.services.allocations import close_allocations, job_hostnames
from apps.jobs.transitions import job_transition
from workers.protocol import KILL_TASK

logger = logging.getLogger(__name__)


def stop_broken_gang(job: Job, *, now: datetime, reason: str) -> str:
    """Stop every node of a multi-node job and requeue it once; a second break fails it."""
    messaging.kill_on_commit(job, job_hostnames(job), settings.JOBS_KILL_GRACE_SECONDS)
    if job.gang_requeued:
        close_allocations(job, now=now)
        message = f"Failed: its nodes broke apart a second time ({reason})."
        job_transition(job, JobStatus.FAILED, at=now, message=message)
        job.save()
    else:
        job.gang_requeued = True
        requeue_attempt(job, now=now, reason=f"multi-node job stopped: {reason}", counted=False)
    messaging.trigger_schedule()
    return job.status


def requeue_attempt(job: Job, *, now: datetime, reason: str, counted: bool = True) -> None:
    """Put a stopped attempt back in the queue, or fail it after JOBS_MAX_REQUEUES requeues
    (counted ones: lost nodes). The attempt number always advances, so reports of the old
    attempt are ignored."""
    close_allocations(job, now=now)
    if counted and job.requeue_count >= settings.JOBS_MAX_REQUEUES:
        message = f"Failed: requeued {job.requeue_count} times ({reason})."
        job_transition(job, JobStatus.FAILED, at=now, message=message)
    else:
        message = f"Requeued ({reason}); waiting for the next scheduling cycle."
        job_transition(job, JobStatus.REQUEUED, at=now, message=message)
        job.requeue_count += 1
    job.save()


def jobs_requeue_for_node(*, node: Node, now: datetime | None = None) -> list[int]:
    """The node is unreachable: requeue the jobs on it (max JOBS_MAX_REQUEUES, then failed).
    Their allocations end now, so the lost attempt is billed only up to now. The node may
    still run them (a broker pause, a network split): each gets a kill, delivered when the node
    listens again, and their GPUs there stay out of the pool until the node confirms the
    process gone (`release_allocations`), so no later attempt shares them with this one."""
    now = now or timezone.now()
    job_ids = set(
        JobAllocation.objects.filter(gpu__node=node, end__isnull=True).values_list(
            "job_id", flat=True
        )
    )
    done = []
    with transaction.atomic():
        jobs = Job.objects.select_for_update().filter(
            pk__in=job_ids, status__in=(*ACTIVE_STATUSES, JobStatus.PREEMPTED)
        )
        for job in jobs:
            hostnames = job_hostnames(job)
            if len(hostnames) > 1 and job.status in ACTIVE_STATUSES:
                # A gang that lost a node: the whole job stops (every node killed), requeued once.
                stop_broken_gang(job, now=now, reason=f"node {node.hostname} unreachable")
                done.append(job.pk)
                continue
            messaging.kill_on_commit(
                job, hostnames or [node.hostname], settings.JOBS_KILL_GRACE_SECONDS
            )
            requeue_attempt(job, now=now, reason=f"node {node.hostname} unreachable")
            done.append(job.pk)
        if done:
            messaging.trigger_schedule()
    return done


def jobs_kill_stale_attempts(*, node: Node, now: datetime | None = None) -> list[tuple[int, int]]:
    """The node reports again after it was lost: every attempt the portal stopped there whose
    end the node has not confirmed gets its kill again (the first may have been lost with the
    broker's queue). The agent kills it, or answers that it does not run it; either way its
    report frees the GPUs. Returns the (job, attempt) pairs."""
    stale = list(
        JobAllocation.objects.filter(gpu__node=node, end__isnull=False, released_at__isnull=True)
        .order_by("job_id", "attempt")
        .values_list("job_id", "attempt")
        .distinct()
    )
    for job_id, attempt in stale:
        messaging.send_agent_task(
            KILL_TASK, node.hostname, job_id, attempt, settings.JOBS_KILL_GRACE_SECONDS
        )
    if stale:
        logger.warning("node %s is back: killing stopped attempts %s", node.hostname, stale)
    return stale


def jobs_expire_stale(*, now: datetime | None = None) -> dict[str, list[int]]:
    """Safety net for lost messages. A job dispatched JOBS_START_TIMEOUT_SECONDS ago whose
    agent never reported it started is requeued (counted); one still active long after its
    maximum runtime (+ grace + the start timeout) is failed. Either way its GPUs are freed."""
    now = now or timezone.now()
    timeout = timedelta(seconds=settings.JOBS_START_TIMEOUT_SECONDS)
    grace = timedelta(seconds=settings.JOBS_KILL_GRACE_SECONDS)
    done: dict[str, list[int]] = {"requeued": [], "failed": []}
    with transaction.atomic():
        stuck = Job.objects.select_for_update(skip_locked=True).filter(
            status=JobStatus.DISPATCHED, dispatched_at__lt=now - timeout
        )
        for job in stuck:
            hostnames = job_hostnames(job)
            messaging.kill_on_commit(job, hostnames, settings.JOBS_KILL_GRACE_SECONDS)
            requeue_attempt(job, now=now, reason="the node never started it")
            done["requeued"].append(job.pk)
        overdue = Job.objects.select_for_update(skip_locked=True).filter(
            status__in=(JobStatus.RUNNING, JobStatus.PREEMPTED), started_at__isnull=False
        )
        for job in overdue:
            if job.started_at + timedelta(seconds=job.max_runtime_seconds) + grace + timeout > now:
                continue
            messaging.kill_on_commit(job, job_hostnames(job), 0)
            close_allocations(job, now=now)
            message = "No report from its node after the maximum runtime."
            job_transition(job, JobStatus.FAILED, at=now, message=message)
            job.save()
            done["failed"].append(job.pk)
    if done["requeued"] or done["failed"]:
        logger.warning("expired stale jobs: %s", done)
    return done
