"""Portal jobs run by Slurm: submit, cancel, and the poll that mirrors their states back."""

import logging
import math
import os
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.fleet.models import Gpu, Node
from apps.integrations.slurm.choices import (
    FINISHED_STATES,
    RUNNING_STATES,
    WAITING_STATES,
    SlurmJobState,
    job_state,
    pending_message,
)
from apps.integrations.slurm.client import (
    PORTAL_COMMENT,
    AccountingRecord,
    QueueEntry,
    SlurmError,
    expand_hostlist,
)
from apps.integrations.slurm.models import SlurmJob, SlurmReservation
from apps.integrations.slurm.services.common import (
    LOG_TAIL_CHARS,
    _model_for_type,
    _refused,
    client,
    cluster_name,
    gpu_type,
    slurm_backend,
)
from apps.jobs.choices import FINISHED_STATUSES, WAITING_STATUSES, JobStatus
from apps.jobs.holdings import allocations_holding_at
from apps.jobs.models import Job, JobAllocation
from apps.jobs.services import close_allocations, release_job_allocations
from apps.jobs.transitions import job_transition

logger = logging.getLogger(__name__)


def slurm_job_submit(*, job: Job) -> SlurmJob:
    """sbatch the portal job under its team's account: `--gres=gpu:<type>:<n> --nodes=1` for
    a one-node job (else `--gpus=<type>:<n>`, Slurm spreads it), `--time` from the maximum
    runtime, `--reservation` when it runs in a booking mirrored in Slurm. Records both ids."""
    type_name = gpu_type(job.gpu_model)
    gpus = f"gpu:{type_name}:{job.gpu_count}" if type_name else f"gpu:{job.gpu_count}"
    reservation = ""
    if job.reservation_id:
        mirrored = SlurmReservation.objects.filter(
            reservation_id=job.reservation_id, deleted_at__isnull=True
        ).first()
        reservation = mirrored.name if mirrored else ""
    out_dir = Path(settings.SLURM_OUTPUT_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = str(out_dir / f"portal-{job.pk}-%j.out")
    partition = settings.SLURM_PARTITIONS.get(job.gpu_model.name, "") if job.gpu_model_id else ""
    try:
        slurm_id = client().submit(
            argv=list(job.argv),
            env=dict(job.env),
            account=job.team.slug,
            gres=gpus if job.same_node else "",
            gpus="" if job.same_node else gpus.removeprefix("gpu:"),
            nodes=1 if job.same_node else None,
            time_minutes=math.ceil(job.max_runtime_seconds / 60),
            job_name=job.name or f"portal-{job.pk}",
            output=output,
            workdir=job.workdir,
            partition=partition,
            reservation=reservation,
            comment=f"{PORTAL_COMMENT}{job.pk}",
        )
    except SlurmError as error:
        raise _refused("the job", error) from error
    slurm_job = SlurmJob.objects.create(
        cluster=cluster_name(),
        slurm_job_id=slurm_id,
        job=job,
        team=job.team,
        account=job.team.slug,
        name=job.name,
        gpu_type=type_name,
        gpus=job.gpu_count,
        output_path=output.replace("%j", str(slurm_id)),
        submitted_at=timezone.now(),
    )
    job.pending_reason = "slurm"
    job.pending_message = f"Submitted to Slurm as job {slurm_id}; waiting for Slurm to place it."
    job.save(update_fields=["pending_reason", "pending_message"])
    return slurm_job


def on_job_submitted(*, job: Job, **_) -> None:
    """Hook `job.submitted`: with JOB_BACKEND=slurm the job goes to Slurm now (a refusal
    rolls the submission back)."""
    if slurm_backend():
        slurm_job_submit(job=job)


def on_job_cancelled(*, job: Job, **_) -> None:
    """Hook `job.cancelled`: scancel the Slurm job; its GPUs are free once Slurm ends it."""
    slurm_job = SlurmJob.objects.select_for_update().filter(job=job).first()
    if slurm_job is None or slurm_job.finished:
        return
    try:
        client().cancel(slurm_job.slurm_job_id)
    except SlurmError as error:
        raise _refused("to cancel the job", error) from error
    now = timezone.now()
    slurm_job.state = SlurmJobState.CANCELLED
    slurm_job.finished = True
    slurm_job.ended_at = now
    slurm_job.save(update_fields=["state", "finished", "ended_at"])
    # No node agent confirms the process is gone: Slurm does, so the GPUs are released now.
    release_job_allocations(job, now=now)


def _read_tail(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(size - LOG_TAIL_CHARS, 0))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None


def _gpus_on(node_name: str, type_name: str) -> list[Gpu]:
    gpus = Gpu.objects.filter(node__hostname=node_name, mig_parent__isnull=True)
    model = _model_for_type(type_name) if type_name else None
    if model is not None:
        gpus = gpus.filter(model=model)
    return list(gpus.order_by("index"))


def _allocate(job: Job, *, indices: dict[str, list[int]], nodes: list[str], count: int, start):
    """Record which portal GPUs the Slurm job holds (the billing meter charges them). Slurm's
    GPU indices are used where it still reports them; otherwise the node's GPUs that no other
    job held at that time."""
    type_name = job.slurm.gpu_type if hasattr(job, "slurm") else ""
    chosen: list[Gpu] = []
    for node_name in nodes:
        on_node = _gpus_on(node_name, type_name)
        wanted = indices.get(node_name)
        if wanted:
            chosen += [g for g in on_node if g.index in wanted]
            continue
        busy = set(
            allocations_holding_at(start, gpu_ids=[g.pk for g in on_node]).values_list(
                "gpu_id", flat=True
            )
        )
        chosen += [g for g in on_node if g.pk not in busy]
    chosen = chosen[:count]
    if not chosen:
        logger.warning("Slurm job of portal job %s runs on GPUs the portal does not know", job.pk)
        return
    JobAllocation.objects.bulk_create(
        [JobAllocation(job=job, gpu=gpu, attempt=job.attempt, start=start) for gpu in chosen],
        ignore_conflicts=True,
    )


def _apply_waiting(job: Job, entry: QueueEntry, expected: datetime | None) -> None:
    if job.status not in WAITING_STATUSES:
        return
    job.pending_reason = entry.reason[:32]
    job.pending_message = pending_message(entry.reason)[:500]
    job.estimated_start = expected
    job.save(update_fields=["pending_reason", "pending_message", "estimated_start"])


def _apply_running(job: Job, slurm_job: SlurmJob, entry: QueueEntry, now: datetime) -> None:
    if job.status == JobStatus.RUNNING:
        # The log is Slurm's output file: its tail follows the job while it runs.
        tail = _read_tail(slurm_job.output_path) if slurm_job.output_path else None
        if tail is not None and tail != job.log_tail:
            job.log_tail = tail
            job.save(update_fields=["log_tail"])
        return
    if job.status not in WAITING_STATUSES:
        return
    started = entry.start or now
    nodes = expand_hostlist(entry.nodes)
    job_transition(job, JobStatus.RUNNING, at=started)
    job.node = Node.objects.filter(hostname__in=nodes[:1]).first()
    job.save()
    slurm_job.started_at = started
    slurm_job.nodes = entry.nodes
    _allocate(
        job,
        indices=client().gpu_indices(slurm_job.slurm_job_id),
        nodes=nodes,
        count=job.gpu_count,
        start=started,
    )


def _lagged_too_long(slurm_job: SlurmJob, now) -> bool:
    """Start (or keep) the clock on a job Slurm's accounting has not caught up with; true once
    it has waited SLURM_LOST_AFTER_SECONDS."""
    slurm_job.missing_since = slurm_job.missing_since or now
    lost_after = timedelta(seconds=settings.SLURM_LOST_AFTER_SECONDS)
    return now - slurm_job.missing_since >= lost_after


def _accounting_has_end(record: AccountingRecord | None) -> bool:
    return record is not None and job_state(record.state) in FINISHED_STATES


def finished_status(state: SlurmJobState, exit_code: int | None) -> str:
    """The portal status of a job Slurm ended in `state`: succeeded only when it completed
    without a failing exit code (none recorded counts as success, as sacct may omit it)."""
    if state == SlurmJobState.COMPLETED and exit_code in (0, None):
        return JobStatus.SUCCEEDED
    if state == SlurmJobState.CANCELLED:
        return JobStatus.CANCELLED
    return JobStatus.FAILED


def _apply_finished(
    job: Job, slurm_job: SlurmJob, state: SlurmJobState, record: AccountingRecord | None, now
) -> None:
    end = (record.end if record else None) or now
    start = (record.start if record else None) or slurm_job.started_at
    slurm_job.finished = True
    slurm_job.ended_at = end
    if record is not None:
        slurm_job.exit_code = record.exit_code
        slurm_job.nodes = record.nodes or slurm_job.nodes
        slurm_job.started_at = start
    if job.status in FINISHED_STATUSES:
        return
    if start and not job.allocations.exists() and state != SlurmJobState.CANCELLED:
        # It ran and ended between two polls: record its GPUs for the time it ran.
        _allocate(
            job,
            indices={},
            nodes=expand_hostlist(slurm_job.nodes),
            count=job.gpu_count,
            start=start,
        )
        job.started_at = job.dispatched_at = start
        job.node = Node.objects.filter(hostname__in=expand_hostlist(slurm_job.nodes)[:1]).first()
    close_allocations(job, now=max(end, start or end))
    release_job_allocations(job, now=end)
    job.exit_code = slurm_job.exit_code
    ended = finished_status(state, job.exit_code)
    if ended == JobStatus.SUCCEEDED:
        message = ""
    elif ended == JobStatus.CANCELLED:
        message = "Cancelled in Slurm."
    else:
        message = f"Slurm ended it: {state.value}."
    job_transition(job, ended, at=end, message=message)
    tail = _read_tail(slurm_job.output_path) if slurm_job.output_path else None
    if tail is not None:
        job.log_tail = tail
    job.save()


def jobs_poll(*, now: datetime | None = None, batch: int | None = None) -> dict[str, int]:
    """Follow Slurm's view of the portal's open jobs: at most `batch` (SLURM_POLL_BATCH) per
    run, least recently polled first, in a few commands (squeue, squeue --start, sacct for
    those that left the queue). Safe to run twice: each change depends on the job's state."""
    now = now or timezone.now()
    batch = batch or settings.SLURM_POLL_BATCH
    open_jobs = list(
        SlurmJob.objects.filter(finished=False, job__isnull=False).order_by(
            F("polled_at").asc(nulls_first=True), "pk"
        )[:batch]
    )
    counts = {"polled": len(open_jobs), "running": 0, "finished": 0, "waiting": 0}
    if not open_jobs:
        return counts
    slurm = client()
    ids = [s.slurm_job_id for s in open_jobs]
    queue = slurm.queue(ids)
    waiting = [i for i, e in queue.items() if job_state(e.state) in WAITING_STATES]
    expected = slurm.expected_starts(waiting) if waiting else {}
    left = [i for i in ids if i not in queue or job_state(queue[i].state) in FINISHED_STATES]
    records = {r.job_id: r for r in slurm.accounting(job_ids=left)} if left else {}
    for stale in open_jobs:
        with transaction.atomic():
            slurm_job = SlurmJob.objects.select_for_update().filter(pk=stale.pk).first()
            if slurm_job is None or slurm_job.finished:
                continue
            job = Job.objects.select_for_update().get(pk=slurm_job.job_id)
            entry = queue.get(slurm_job.slurm_job_id)
            record = records.get(slurm_job.slurm_job_id)
            state = job_state(record.state if record else entry.state if entry else "")
            if entry is not None and state not in FINISHED_STATES:
                state = job_state(entry.state)
            slurm_job.polled_at = now
            if entry is not None:
                slurm_job.reason = entry.reason[:64]
            if entry is None and record is None:
                # Not in the queue and not (yet) in accounting: sacct lags a little; a job
                # missing for SLURM_LOST_AFTER_SECONDS is gone (purged, or no accounting).
                if _lagged_too_long(slurm_job, now):
                    _apply_finished(job, slurm_job, SlurmJobState.UNKNOWN, None, now)
                    slurm_job.state = SlurmJobState.UNKNOWN
                    job.pending_message = "Slurm no longer knows the job; it is marked failed."
                    job.save(update_fields=["pending_message"])
                    counts["finished"] += 1
                slurm_job.save()
                continue
            if state in FINISHED_STATES and not _accounting_has_end(record):
                # squeue shows the end before slurmdbd has recorded it (its record still reads
                # RUNNING with exit code 0): wait for accounting's exit code and end time, and
                # finish without them only once it has lagged SLURM_LOST_AFTER_SECONDS.
                if not _lagged_too_long(slurm_job, now):
                    slurm_job.save()
                    continue
                record = None
            slurm_job.missing_since = None
            if state in FINISHED_STATES:
                _apply_finished(job, slurm_job, state, record, now)
                counts["finished"] += 1
            elif state in RUNNING_STATES and entry is not None:
                _apply_running(job, slurm_job, entry, now)
                counts["running"] += 1
            elif state in WAITING_STATES and entry is not None:
                _apply_waiting(job, entry, expected.get(slurm_job.slurm_job_id))
                counts["waiting"] += 1
            if state != SlurmJobState.UNKNOWN:
                slurm_job.state = state
            slurm_job.save()
    return counts


def jobs_reconcile(*, now: datetime | None = None, older_than: timedelta | None = None):
    """Cancel Slurm jobs that carry the portal's comment but that no portal job records: the
    submit was rolled back after sbatch had said yes. Only jobs submitted `older_than` ago
    (default 5 minutes), so a submit still committing is never touched."""
    now = now or timezone.now()
    older_than = timedelta(minutes=5) if older_than is None else older_than
    slurm = client()
    queued = slurm.portal_jobs()
    known = set(
        SlurmJob.objects.filter(cluster=cluster_name(), slurm_job_id__in=queued).values_list(
            "slurm_job_id", flat=True
        )
    )
    cancelled = []
    for job_id, (_comment, submitted) in sorted(queued.items()):
        if job_id in known or submitted is None or submitted > now - older_than:
            continue
        slurm.cancel(job_id)
        cancelled.append(job_id)
    if cancelled:
        logger.warning("cancelled Slurm jobs no portal job records: %s", cancelled)
    return {"cancelled": cancelled}
