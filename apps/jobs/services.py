"""Business rules of GPU jobs: submit, cancel, agent reports, requeue and preemption.

Every way a job stops closes its open `JobAllocation` rows (end = now): the billing meter charges
job GPU time from [start, end) of allocations, so a requeued or preempted attempt is never billed
twice. Agents are reached through `apps.jobs.messaging` after the transaction commits.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from apps.audit.services import audit_record
from apps.fleet.choices import GpuStatus
from apps.fleet.models import Gpu, GpuModel, Node
from apps.jobs import messaging
from apps.jobs.choices import (
    ACTIVE_STATUSES,
    FINISHED_STATUSES,
    WAITING_STATUSES,
    JobPriorityClass,
    JobStatus,
)
from apps.jobs.models import Job, JobAllocation
from apps.jobs.transitions import job_transition
from apps.outbox.services import outbox_withdraw
from apps.reservations.choices import OPEN_STATUSES as RESERVATION_OPEN_STATUSES
from apps.reservations.models import Reservation
from apps.teams.models import Membership, Team
from apps.teams.permissions import is_platform_admin
from apps.teams.selectors import team_quota_rule
from portal import hooks
from portal.exceptions import ConflictError, PolicyRefusal
from portal.formatting import format_count
from portal.pg_text import storable, text_problem
from workers.protocol import KILL_TASK, hostname_of_queue

logger = logging.getLogger(__name__)

MAX_ARGS = 1000
MAX_ARG_LENGTH = 4096
MAX_ENV = 200
MAX_ENV_VALUE = 8192
LOG_TAIL_CHARS = 16_000


def _withdraw_launches(job: Job, hostnames: list[str], *, now: datetime) -> list[str]:
    """Drop the attempt's launches still waiting in the outbox (the broker is down): those
    nodes never start it, so they need no kill and its GPUs there are free at once. Returns
    the nodes that may run it (their launch went out): they get the kill."""
    unsent = {hostname_of_queue(queue) for queue in outbox_withdraw(key=messaging.launch_key(job))}
    for hostname in unsent:
        release_allocations(job_id=job.pk, attempt=job.attempt, hostname=hostname, now=now)
    return [h for h in hostnames if h not in unsent]


def _job_hostnames(job: Job) -> list[str]:
    """Nodes running the job's current attempt (primary node first)."""
    names = list(
        JobAllocation.objects.filter(job=job, end__isnull=True)
        .values_list("gpu__node__hostname", flat=True)
        .distinct()
    )
    primary = job.node.hostname if job.node_id else None
    return sorted(set(names), key=lambda h: (h != primary, h))


def close_allocations(job: Job, *, now: datetime) -> int:
    """End the job's open allocations at `now`: billing stops there. The GPUs stay out of the
    scheduler's pool until each node confirms the process is gone (`release_allocations`)."""
    return JobAllocation.objects.filter(job=job, end__isnull=True).update(end=now)


def release_allocations(*, job_id: int, attempt: int, hostname: str, now: datetime) -> int:
    """A node reported the attempt's process finished (or never ran there): its GPUs of that
    attempt are free for the scheduler again."""
    return JobAllocation.objects.filter(
        job_id=job_id, attempt=attempt, gpu__node__hostname=hostname, released_at__isnull=True
    ).update(released_at=now)


def release_job_allocations(job: Job, *, now: datetime) -> int:
    """An execution backend confirmed the job's end itself (Slurm, where no node agent
    reports): every GPU the job still holds is free for the scheduler again at `now`."""
    return JobAllocation.objects.filter(job=job, released_at__isnull=True).update(released_at=now)


# --- submit ----------------------------------------------------------------------------------


def _validate_argv(argv) -> list[str]:
    if isinstance(argv, str) or not isinstance(argv, list):
        raise ValidationError({"argv": "Give the command as a list of arguments, not a string."})
    if not argv:
        raise ValidationError({"argv": "The command must have at least one argument."})
    if len(argv) > MAX_ARGS:
        raise ValidationError({"argv": f"At most {MAX_ARGS} arguments."})
    for arg in argv:
        if not isinstance(arg, str):
            raise ValidationError({"argv": "Every argument must be a string."})
        if len(arg) > MAX_ARG_LENGTH or "\x00" in arg:
            raise ValidationError({"argv": "An argument is too long or contains a NUL byte."})
    if not argv[0].strip():
        raise ValidationError({"argv": "The program (first argument) must not be empty."})
    return argv


def _validate_env(env) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise ValidationError({"env": "Give the environment as NAME: value pairs."})
    if len(env) > MAX_ENV:
        raise ValidationError({"env": f"At most {MAX_ENV} variables."})
    for name, value in env.items():
        if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
            raise ValidationError({"env": f"{name!r} is not a valid variable name."})
        if name.startswith("CUDA_VISIBLE_DEVICES"):
            raise ValidationError({"env": "CUDA_VISIBLE_DEVICES is set by the portal."})
        if not isinstance(value, str) or len(value) > MAX_ENV_VALUE or "\x00" in value:
            raise ValidationError({"env": f"The value of {name} must be a short string."})
    return env


def fleet_size(gpu_model: GpuModel | None) -> tuple[int, int]:
    """(GPUs of the model in the fleet, GPUs of it on the largest node), counting whole GPUs
    that are not retired. For any model (None): the largest of those over all models, since
    a job's GPUs are all of one model."""
    gpus = Gpu.objects.filter(mig_parent__isnull=True).exclude(status=GpuStatus.RETIRED)
    if gpu_model is not None:
        gpus = gpus.filter(model=gpu_model)
    rows = gpus.values("node_id", "model_id").annotate(n=Count("id")).order_by()
    per_model: dict[int, int] = {}
    largest = 0
    for row in rows:
        per_model[row["model_id"]] = per_model.get(row["model_id"], 0) + row["n"]
        largest = max(largest, row["n"])
    return max(per_model.values(), default=0), largest


def _require_within_guarantee(team: Team, gpu_model: GpuModel | None, gpu_count: int) -> None:
    """Refuse (400 on priority_class) a Guaranteed job larger than the team's guarantee: the
    class runs only within the guarantee, so such a job would wait for ever. The message
    names the fix."""
    rule = team_quota_rule(team=team)
    models = (
        [gpu_model.name]
        if gpu_model is not None
        else list(GpuModel.objects.order_by("name").values_list("name", flat=True))
    )
    ceiling = max((rule.guarantee_ceiling(team.slug, model) for model in models), default=0)
    if gpu_count <= ceiling:
        return
    noun = f"{gpu_model.name} GPU" if gpu_model is not None else "GPU"
    over_quota = JobPriorityClass.OVER_QUOTA.label.split(" (", 1)[0]
    if ceiling == 0:
        message = (
            f"Team {team.slug} has no guaranteed {noun}s, so its jobs cannot run as Guaranteed. "
            f"Choose {over_quota}: the job then runs on spare GPUs within the team's limit and "
            "may be preempted."
        )
    else:
        message = (
            f"Team {team.slug} is guaranteed {format_count(ceiling, noun)}"
            f"{'' if gpu_model is not None else ' of one model'}, so a {gpu_count}-GPU job "
            f"cannot run as Guaranteed. Choose {over_quota} to run it on spare GPUs within the "
            "team's limit (it may be preempted), or ask for at most "
            f"{format_count(ceiling, 'GPU')}."
        )
    raise ValidationError({"priority_class": message})


def job_submit(
    *,
    actor,
    team: Team,
    argv,
    gpu_count: int,
    max_runtime_seconds: int,
    gpu_model: GpuModel | None = None,
    name: str = "",
    workdir: str = "",
    env=None,
    same_node: bool = True,
    priority_class: str = JobPriorityClass.OVER_QUOTA,
    reservation: Reservation | None = None,
    checkpointable: bool = False,
) -> Job:
    """Queue a job for the team. Members of the team may submit. Refuses (400, per field) an
    empty or string argv, bad env names, more GPUs than one node has (same_node) or than the
    fleet has, a runtime above JOBS_MAX_RUNTIME_SECONDS, a reservation of another team or
    smaller than the job, and a Guaranteed job larger than the team's guarantee."""
    if not Membership.objects.filter(user=actor, team=team).exists():
        raise PolicyRefusal("Only members of the team may submit its jobs.", code="not_member")
    argv = _validate_argv(argv)
    env = _validate_env(env)
    if not isinstance(gpu_count, int) or gpu_count < 1:
        raise ValidationError({"gpu_count": "Ask for at least one GPU."})
    limit = settings.JOBS_MAX_RUNTIME_SECONDS
    if not isinstance(max_runtime_seconds, int) or max_runtime_seconds < 1:
        raise ValidationError({"max_runtime_seconds": "The maximum runtime must be positive."})
    if max_runtime_seconds > limit:
        raise ValidationError(
            {"max_runtime_seconds": f"The maximum runtime may be at most {limit} seconds."}
        )
    if priority_class not in JobPriorityClass.values:
        raise ValidationError({"priority_class": "Unknown priority class."})
    if reservation is not None:
        if reservation.team_id != team.pk:
            raise ValidationError({"reservation": "The reservation belongs to another team."})
        if reservation.status not in RESERVATION_OPEN_STATUSES:
            raise ValidationError({"reservation": "The reservation is over or cancelled."})
        if gpu_model is not None and gpu_model.pk != reservation.gpu_model_id:
            raise ValidationError({"gpu_model": "The reservation is for another GPU model."})
        if gpu_count > reservation.count:
            held = format_count(reservation.count, "GPU")
            raise ValidationError({"gpu_count": f"The reservation holds only {held}."})
        gpu_model = reservation.gpu_model
    total, largest = fleet_size(gpu_model)
    what = f"{gpu_model.name} GPUs" if gpu_model else "GPUs"
    if same_node and gpu_count > largest:
        # Larger than any node: a multi-node gang (each node gets its rank and the rendezvous).
        same_node = False
    if gpu_count > total:
        raise ValidationError({"gpu_count": f"The fleet has only {total} {what}."})
    if priority_class == JobPriorityClass.GUARANTEED and reservation is None:
        _require_within_guarantee(team, gpu_model, gpu_count)
    with transaction.atomic():
        job = Job.objects.create(
            team=team,
            submitted_by=actor,
            name=name[:200],
            argv=argv,
            workdir=workdir,
            env=env,
            gpu_model=gpu_model,
            gpu_count=gpu_count,
            same_node=same_node,
            max_runtime_seconds=max_runtime_seconds,
            priority_class=priority_class,
            reservation=reservation,
            checkpointable=bool(checkpointable),
            pending_message="Waiting for the next scheduling cycle.",
        )
        # An execution backend (Slurm) may take the job here; its refusal undoes the submit.
        hooks.emit("job.submitted", job=job)
        messaging.trigger_schedule()
    return job


# --- cancel ----------------------------------------------------------------------------------


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
        hostnames = _job_hostnames(job)
        before = {"status": job.status}
        job_transition(job, JobStatus.CANCELLED, at=now, message="")
        job.save()
        close_allocations(job, now=now)
        hostnames = _withdraw_launches(job, hostnames, now=now)
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


# --- reports from agents ---------------------------------------------------------------------


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
        hostnames = _job_hostnames(job)
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
            _requeue(job, now=now, reason="preempted", counted=False)
        elif job.status in ACTIVE_STATUSES:
            ended = JobStatus.SUCCEEDED if job.exit_code == 0 else JobStatus.FAILED
            job_transition(job, ended, at=now)
            job.save()
        else:  # queued/requeued: a late report of a stopped attempt
            job.save(update_fields=["log_tail", "exit_code"])
            return "ignored"
        messaging.trigger_schedule()
        return job.status


# --- requeue and preemption ------------------------------------------------------------------


def _secondary_rank_report(job: Job, report: dict, event: str, *, now: datetime) -> str:
    """A node other than rank 0 reports. Its "finished" with a failure (non-zero exit, or no
    exit code: it could not launch or was killed) while the job is active breaks the gang:
    the other ranks would hang in their collectives, so the whole job is stopped."""
    exit_code = report.get("exit_code")
    if event != "finished" or job.status not in ACTIVE_STATUSES or exit_code == 0:
        return "ignored"
    rank = report.get("rank")
    return _gang_broken(
        job, now=now, reason=f"rank {rank} on {report.get('node') or 'its node'} ended "
        f"(exit code {exit_code})"
    )  # fmt: skip


def _gang_broken(job: Job, *, now: datetime, reason: str) -> str:
    """Stop every node of a multi-node job and requeue it once; a second break fails it."""
    messaging.kill_on_commit(job, _job_hostnames(job), settings.JOBS_KILL_GRACE_SECONDS)
    if job.gang_requeued:
        close_allocations(job, now=now)
        message = f"Failed: its nodes broke apart a second time ({reason})."
        job_transition(job, JobStatus.FAILED, at=now, message=message)
        job.save()
    else:
        job.gang_requeued = True
        _requeue(job, now=now, reason=f"multi-node job stopped: {reason}", counted=False)
    messaging.trigger_schedule()
    return job.status


def _requeue(job: Job, *, now: datetime, reason: str, counted: bool = True) -> None:
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
            hostnames = _job_hostnames(job)
            if len(hostnames) > 1 and job.status in ACTIVE_STATUSES:
                # A gang that lost a node: the whole job stops (every node killed), requeued once.
                _gang_broken(job, now=now, reason=f"node {node.hostname} unreachable")
                done.append(job.pk)
                continue
            messaging.kill_on_commit(
                job, hostnames or [node.hostname], settings.JOBS_KILL_GRACE_SECONDS
            )
            _requeue(job, now=now, reason=f"node {node.hostname} unreachable")
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
            hostnames = _job_hostnames(job)
            messaging.kill_on_commit(job, hostnames, settings.JOBS_KILL_GRACE_SECONDS)
            _requeue(job, now=now, reason="the node never started it")
            done["requeued"].append(job.pk)
        overdue = Job.objects.select_for_update(skip_locked=True).filter(
            status__in=(JobStatus.RUNNING, JobStatus.PREEMPTED), started_at__isnull=False
        )
        for job in overdue:
            if job.started_at + timedelta(seconds=job.max_runtime_seconds) + grace + timeout > now:
                continue
            messaging.kill_on_commit(job, _job_hostnames(job), 0)
            close_allocations(job, now=now)
            message = "No report from its node after the maximum runtime."
            job_transition(job, JobStatus.FAILED, at=now, message=message)
            job.save()
            done["failed"].append(job.pk)
    if done["requeued"] or done["failed"]:
        logger.warning("expired stale jobs: %s", done)
    return done


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
        messaging.kill_on_commit(job, _job_hostnames(job), grace)
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


__all__ = [
    "WAITING_STATUSES",
    "close_allocations",
    "job_cancel",
    "job_preempt",
    "job_report",
    "job_submit",
    "jobs_kill_stale_attempts",
    "jobs_requeue_for_node",
    "release_job_allocations",
]
