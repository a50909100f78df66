"""Stopping a job on request: a member's (or an admin's) cancel, and a preemption for another
job. Both kill the attempt on its nodes after the commit; a launch still waiting in the outbox
is withdrawn instead."""

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.jobs import messaging
from apps.jobs.choices import ACTIVE_STATUSES, FINISHED_STATUSES, JobStatus
from apps.jobs.models import Job, JobAllocation
from apps.jobs.services.allocations import close_allocations, job_hostnames, release_allocations
from apps.jobs.transitions import job_transition
from apps.outbox.services import outbox_withdraw
from apps.teams.models import Membership
from apps.teams.permissions import is_platform_admin
from portal import hooks
from portal.exceptions import ConflictError, PolicyRefusal
from workers.protocol import hostname_of_queue


def withdraw_launches(job: Job, hostnames: list[str], *, now: datetime) -> list[str]:
    """Drop the attempt's launches still waiting in the outbox (the broker is down): those
    nodes never start it, so they need no kill and its GPUs there are free at once. Returns
    the nodes that may run it (their launch went out): they get the kill."""
    unsent = {hostname_of_queue(queue) for queue in outbox_withdraw(key=messaging.launch_key(job))}
    for hostname in unsent:
        release_allocations(job_id=job.pk, attempt=job.attempt, hostname=hostname, now=now)
    return [h for h in hostnames if h not in unsent]


def job_cancel(*, job: Job, actor, reason: str = "", audit: bool = False) -> Job:
    """Cancel a job that has not finished (409 otherwise). A running job's processes get
    SIGTERM, then SIGKILL after the grace period; its GPUs are free once its nodes confirm. A
    launch still waiting in the outbox is withdrawn instead (never sent, nothing to kill, its
    GPUs free at once). Cancelling
    another team's job as a platform admin (or with audit=True, e.g. from the admin site) is
    audited."""
    now = timezone.now()
    member = Membership.objects.filter(user=actor, team_id=job.team_id).exists()
    if not member and not is_platform_admin(actor):
        raise PolicyRefusal(
            "Only members of the team or platform admins may cancel its jobs.", code="not_member"
        )
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.status in FINISHED_STATUSES:
            raise ConflictError(f"The job has already {job.status}.", code="job_finished")
        hostnames = job_hostnames(job)
        before = {"status": job.status}
        job_transition(job, JobStatus.CANCELLED, at=now, message="")
        job.save()
        close_allocations(job, now=now)
        hostnames = withdraw_launches(job, hostnames, now=now)
        if hostnames:
            messaging.kill_on_commit(job, hostnames, settings.JOBS_KILL_GRACE_SECONDS)
        hooks.emit("job.cancelled", job=job, actor=actor)
        if audit or not member:
            audit_record(
                actor=actor,
                action="job.cancel",
                target=job,
                before=before,
                after={"status": job.status},
                reason=reason,
            )
        messaging.trigger_schedule()
    return job


def job_preempt(
    *, job: Job, for_job_id: int | None = None, actor=None, grace_seconds: int | None = None
) -> Job:
    """Stop an active job so others can use its GPUs: SIGTERM, grace, SIGKILL on its nodes.
    It becomes `preempted` and is requeued when its agent reports the process ended (an agent
    that never launched it reports that too; a lost node requeues it). Counts the preemption
    (the scheduler protects a job preempted JOBS_MAX_PREEMPTIONS_PER_JOB times) and, unless
    the job is checkpointable, the GPU-seconds its attempt loses. Forced by an admin: audited."""
    grace = settings.JOBS_KILL_GRACE_SECONDS if grace_seconds is None else grace_seconds
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.status not in ACTIVE_STATUSES:
            raise ConflictError(f"The job is {job.status}, not running.", code="job_not_running")
        before = {"status": job.status}
        job.preemption_count += 1
        if not job.checkpointable:
            # The attempt's work is thrown away; a checkpointable job resumes from its own save.
            since = job.started_at or job.dispatched_at or now
            gpus = JobAllocation.objects.filter(job=job, end__isnull=True).count()
            job.gpu_seconds_lost += gpus * max(0.0, (now - since).total_seconds())
        message = (
            f"Preempted for job #{for_job_id}; it is requeued once stopped."
            if for_job_id
            else "Preempted; it is requeued once stopped."
        )
        job_transition(job, JobStatus.PREEMPTED, at=now, message=message)
        job.save()
        messaging.kill_on_commit(job, job_hostnames(job), grace)
        if actor is not None:
            audit_record(
                actor=actor,
                action="job.preempt",
                target=job,
                before=before,
                after={"status": JobStatus.PREEMPTED},
                reason="forced by a platform admin",
            )
    return job
