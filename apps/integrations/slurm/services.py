"""Business rules of the Slurm integration: jobs, bookings and quotas mirrored into Slurm.

The portal stays the source of truth for who may book and submit (quota, budget, roles); Slurm
places and runs the work. Hook subscribers (`on_*`, named in settings `SLURM_HOOKS`) run inside
the portal's transaction: when Slurm refuses, they raise `SlurmRefused` and the booking, job or
quota edit is rolled back with Slurm's reason. Beat tasks poll job states (`jobs_poll`) and
correct drift (`quotas_sync`, `reservations_reconcile`).
"""

import getpass
import logging
import math
import os
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from rest_framework import status

from apps.audit.services import audit_record
from apps.fleet.choices import NodeStatus
from apps.fleet.models import Gpu, GpuModel, Node
from apps.fleet.services import node_set_scheduler_drained
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
    SlurmClient,
    SlurmError,
    expand_hostlist,
    parse_tres,
)
from apps.integrations.slurm.models import SlurmJob, SlurmNode, SlurmReservation
from apps.jobs.choices import FINISHED_STATUSES, WAITING_STATUSES, JobStatus
from apps.jobs.models import Job, JobAllocation
from apps.reservations.choices import OPEN_STATUSES as RESERVATION_OPEN_STATUSES
from apps.reservations.models import Reservation
from apps.teams.models import Quota, Team, User
from portal.exceptions import ApplicationError

logger = logging.getLogger(__name__)

LOG_TAIL_CHARS = 16_000


class SlurmRefused(ApplicationError):
    """Slurm refused (or could not be asked to do) what the portal asked; nothing was saved."""

    code = "slurm_refused"
    status_code = status.HTTP_409_CONFLICT


def client() -> SlurmClient:
    return SlurmClient()


def _refused(what: str, error: SlurmError) -> SlurmRefused:
    return SlurmRefused(
        f"Slurm refused {what}: {error.reason}",
        detail={"command": " ".join(error.command[:3]), "slurm": error.output[-2000:]},
    )


def slurm_backend() -> bool:
    return settings.JOB_BACKEND == "slurm"


@cache
def _cluster_name(conf: str, configured: str) -> str:
    if configured:
        return configured
    for line in client().run("scontrol", "show", "config").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ClusterName":
            return value.strip()
    raise SlurmError("scontrol show config did not name the cluster; set SLURM_CLUSTER.")


def cluster_name() -> str:
    """The Slurm cluster's name (settings SLURM_CLUSTER, else asked once from slurmctld)."""
    return _cluster_name(settings.SLURM_CONF, settings.SLURM_CLUSTER)


def gpu_type(gpu_model: GpuModel | None) -> str:
    """Slurm's gres type for a portal GPU model (SLURM_GPU_TYPES, else the name lowercased)."""
    if gpu_model is None:
        return ""
    return settings.SLURM_GPU_TYPES.get(gpu_model.name, gpu_model.name.lower())


def _model_for_type(type_name: str) -> GpuModel | None:
    for model in GpuModel.objects.all():
        if gpu_type(model) == type_name:
            return model
    return None


def reservation_name(reservation: Reservation) -> str:
    return f"{settings.SLURM_RESERVATION_PREFIX}{reservation.pk}"


# --- jobs --------------------------------------------------------------------------------------


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
    JobAllocation.objects.filter(job=job, released_at__isnull=True).update(released_at=now)


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
            JobAllocation.objects.filter(gpu__in=on_node, start__lte=start)
            .filter(Q(end__isnull=True) | Q(end__gt=start))
            .values_list("gpu_id", flat=True)
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
    job.status = JobStatus.RUNNING
    job.started_at = job.dispatched_at = started
    job.node = Node.objects.filter(hostname__in=nodes[:1]).first()
    job.pending_reason = job.pending_message = ""
    job.estimated_start = None
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
    JobAllocation.objects.filter(job=job, end__isnull=True).update(end=max(end, start or end))
    JobAllocation.objects.filter(job=job, released_at__isnull=True).update(released_at=end)
    job.exit_code = slurm_job.exit_code
    job.finished_at = end
    if state == SlurmJobState.COMPLETED and (job.exit_code in (0, None)):
        job.status = JobStatus.SUCCEEDED
        job.pending_message = ""
    elif state == SlurmJobState.CANCELLED:
        job.status = JobStatus.CANCELLED
        job.pending_message = "Cancelled in Slurm."
    else:
        job.status = JobStatus.FAILED
        job.pending_message = f"Slurm ended it: {state.value}."
    job.pending_reason = ""
    job.estimated_start = None
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


# --- bookings ----------------------------------------------------------------------------------


def _booking_nodes(reservation: Reservation) -> list[str]:
    return sorted(
        set(reservation.holdings.filter(active=True).values_list("gpu__node__hostname", flat=True))
    )


def on_reservation_created(*, reservation: Reservation, **_) -> SlurmReservation:
    """Hook `reservation.created`: an advance reservation on the booking's nodes for the team's
    account. Slurm 22.05 reserves whole nodes (it cannot reserve GPUs by count), so a second
    team's booking on a node already reserved in Slurm is refused and rolled back."""
    name = reservation_name(reservation)
    nodes = _booking_nodes(reservation)
    now = timezone.now()
    try:
        client().reservation_create(
            name=name,
            start=None if reservation.start <= now else reservation.start,
            end=reservation.end,
            nodes=nodes,
            accounts=[reservation.team.slug],
        )
    except SlurmError as error:
        raise _refused("the booking", error) from error
    return SlurmReservation.objects.create(
        reservation=reservation, name=name, nodes=",".join(nodes), end=reservation.end
    )


def on_reservation_extended(*, reservation: Reservation, **_) -> None:
    """Hook `reservation.extended`: move the Slurm reservation's end (refusal rolls back)."""
    mirrored = SlurmReservation.objects.filter(
        reservation=reservation, deleted_at__isnull=True
    ).first()
    if mirrored is None:
        return
    try:
        client().reservation_update(name=mirrored.name, end=reservation.end)
    except SlurmError as error:
        raise _refused("to extend the booking", error) from error
    mirrored.end = reservation.end
    mirrored.save(update_fields=["end"])


def on_reservation_ended(*, reservation: Reservation, **_) -> None:
    """Hook `reservation.ended` (cancelled or released idle): delete the Slurm reservation."""
    mirrored = SlurmReservation.objects.filter(
        reservation=reservation, deleted_at__isnull=True
    ).first()
    if mirrored is None:
        return
    try:
        client().reservation_delete(mirrored.name)
    except SlurmError as error:
        raise _refused("to remove the booking's reservation", error) from error
    mirrored.deleted_at = timezone.now()
    mirrored.save(update_fields=["deleted_at"])


def reservations_reconcile(*, now: datetime | None = None) -> dict[str, list[str]]:
    """Delete Slurm reservations of ours (name prefix) whose booking is over, cancelled or
    was never committed; mark those Slurm already dropped as deleted."""
    now = now or timezone.now()
    prefix = settings.SLURM_RESERVATION_PREFIX
    in_slurm = {n for n in client().reservations() if n.startswith(prefix)}
    live = set(
        SlurmReservation.objects.filter(
            deleted_at__isnull=True,
            reservation__status__in=RESERVATION_OPEN_STATUSES,
            reservation__end__gt=now,
        ).values_list("name", flat=True)
    )
    removed = sorted(in_slurm - live)
    for name in removed:
        client().reservation_delete(name)
    SlurmReservation.objects.filter(deleted_at__isnull=True).exclude(
        name__in=in_slurm - set(removed)
    ).update(deleted_at=now)
    return {"removed": removed}


# --- nodes -------------------------------------------------------------------------------------

DRAIN_REASON_PREFIX = "portal:"


def on_node_state_changed(*, node: Node, operation: str, reason: str = "", actor=None, **_):
    """Hook `node.state_changed`: a node drained or retired in the portal is drained in Slurm
    (running jobs finish, no new ones start), undrained is resumed. Nodes Slurm does not know
    are left alone; any other refusal undoes the portal's change."""
    if operation in ("drain", "retire"):
        who = actor.get_username() if actor is not None else "system"
        words = f"{DRAIN_REASON_PREFIX} {operation} by {who}" + (f": {reason}" if reason else "")
        state, why = "DRAIN", words[:200]
    elif operation == "undrain":
        state, why = "RESUME", ""
    else:
        return
    try:
        client().node_update(node.hostname, state=state, reason=why)
    except SlurmError as error:
        if "invalid node name" in error.reason.lower():
            return
        raise _refused(f"to {operation} node {node.hostname}", error) from error


OUT_OF_SERVICE_STATES = {"drained", "draining", "drain", "down", "fail", "failing"}


def out_of_service(state: str) -> bool:
    """Whether Slurm's node state (`sinfo %T`: `drained`, `down*`, `mixed+drain`, ...) keeps
    new work off the node."""
    words = state.lower().rstrip("*~#!%$@^-").split("+")
    return any(word.rstrip("*~#!%$@^-") in OUT_OF_SERVICE_STATES for word in words)


def nodes_out_of_service() -> dict[str, str]:
    """Nodes Slurm has drained or marked down, with Slurm's reason (for slurm_check)."""
    return {
        name: f"{state}" + (f" ({why})" if why else "")
        for name, (state, why) in client().node_states().items()
        if out_of_service(state)
    }


def nodes_sync(*, now: datetime | None = None) -> dict[str, list[str]]:
    """Follow Slurm's node states (one `sinfo` per run): store each node's state and reason
    for the fleet page; a portal node that Slurm drained or marked down (not the portal's own
    drain, whose reason starts with `portal:`) is drained in the portal, audited with Slurm's
    reason; when Slurm puts such a node back, the portal undrains it. A node a portal admin
    drained is never undrained here. Safe to run twice: the second run changes nothing."""
    now = now or timezone.now()
    states = client().node_states()
    report: dict[str, list[str]] = {"drained": [], "undrained": []}
    readings = {r.hostname: r for r in SlurmNode.objects.filter(hostname__in=states)}
    nodes = {n.hostname: n for n in Node.objects.filter(hostname__in=states)}
    for hostname, (state, why) in sorted(states.items()):
        with transaction.atomic():
            reading = readings.get(hostname) or SlurmNode(hostname=hostname)
            reading.state, reading.reason, reading.read_at = state[:64], why[:500], now
            node = nodes.get(hostname)
            ours = why.startswith(DRAIN_REASON_PREFIX)
            if node is not None and out_of_service(state) and not ours:
                words = state + (f" ({why})" if why else "")
                if node_set_scheduler_drained(
                    node=node, drained=True, scheduler="Slurm", reason=words
                ):
                    reading.drained_in_portal = True
                    report["drained"].append(hostname)
            elif node is not None and reading.drained_in_portal and not out_of_service(state):
                if node_set_scheduler_drained(
                    node=node, drained=False, scheduler="Slurm", reason=f"back in service ({state})"
                ):
                    report["undrained"].append(hostname)
                reading.drained_in_portal = False
            if node is not None and reading.drained_in_portal:
                # An admin undrained (or retired) it since: it is no longer Slurm's drain.
                status = Node.objects.filter(pk=node.pk).values_list("status", flat=True).get()
                reading.drained_in_portal = status == NodeStatus.DRAINED
            reading.save()
    # Nodes that left Slurm: no reading to show (a drain they caused stays, for an admin).
    SlurmNode.objects.exclude(hostname__in=states).filter(drained_in_portal=False).delete()
    return report


# --- quotas ------------------------------------------------------------------------------------


def desired_limits(team: Team) -> tuple[dict[str, str], int]:
    """The team's quota as Slurm limits: GrpTRES per gres type (`gres/gpu:<type>`; the
    any-model quota as `gres/gpu`) from the limits, and a Fairshare from the guarantees."""
    tres: dict[str, str] = {}
    guaranteed = 0
    for quota in Quota.objects.filter(team=team).select_related("gpu_model"):
        key = f"gres/gpu:{gpu_type(quota.gpu_model)}" if quota.gpu_model_id else "gres/gpu"
        tres[key] = str(quota.limit)
        guaranteed += quota.guaranteed
    return tres, max(guaranteed, 1)


def _submit_user() -> str:
    return settings.SLURM_SUBMIT_USER or getpass.getuser()


def limits_drift(team: Team) -> dict | None:
    """How the team's Slurm account differs from its quotas, without changing anything:
    {"slurm": {...}, "portal": {...}} (Slurm's side None when it has no account), or None."""
    current = client().account_limits(team.slug)
    want, fairshare = desired_limits(team)
    portal = {"grptres": ",".join(f"{k}={v}" for k, v in sorted(want.items())),
              "fairshare": str(fairshare)}  # fmt: skip
    if current is None:
        return {"slurm": None, "portal": portal}
    have = {k: v for k, v in parse_tres(current["grptres"]).items() if k.startswith("gres/gpu")}
    if have == want and current["fairshare"] == str(fairshare):
        return None
    return {"slurm": current, "portal": portal}


def quota_sync_team(*, team: Team, actor=None, reason: str = "") -> dict | None:
    """Make the team's Slurm account match its quotas: create the account (and the submit
    user's association) if missing, set GrpTRES and Fairshare where they drifted. Idempotent;
    each correction is audited with what Slurm had before. Returns the change, or None."""
    slurm = client()
    cluster = [f"cluster={settings.SLURM_CLUSTER}"] if settings.SLURM_CLUSTER else []
    current = slurm.account_limits(team.slug)
    created = current is None
    if created:
        slurm.sacctmgr(
            "add",
            "account",
            team.slug,
            f"Description={team.name or team.slug}",
            "Organization=portal",
            *cluster,
        )
        current = {"grptres": "", "fairshare": "1"}
    user = _submit_user()
    if user not in slurm.account_users(team.slug):
        slurm.sacctmgr("add", "user", user, f"Account={team.slug}", *cluster)
    have = {k: v for k, v in parse_tres(current["grptres"]).items() if k.startswith("gres/gpu")}
    want, fairshare = desired_limits(team)
    changes = dict(want.items() - have.items())
    changes.update({key: "-1" for key in have if key not in want})
    fairshare_changed = current["fairshare"] != str(fairshare)
    if not changes and not fairshare_changed and not created:
        return None
    settings_args = []
    if changes:
        settings_args.append("GrpTRES=" + ",".join(f"{k}={v}" for k, v in sorted(changes.items())))
    if fairshare_changed:
        settings_args.append(f"Fairshare={fairshare}")
    if settings_args:
        slurm.sacctmgr("modify", "account", "where", f"name={team.slug}", *cluster, "set",
                       *settings_args)  # fmt: skip
    change = {
        "before": {"grptres": current["grptres"], "fairshare": current["fairshare"]},
        "after": {
            "grptres": ",".join(f"{k}={v}" for k, v in sorted(want.items())),
            "fairshare": str(fairshare),
        },
    }
    audit_record(
        actor=actor,
        action="slurm.account_create" if created else "slurm.limits_sync",
        target=team,
        before=None if created else change["before"],
        after=change["after"],
        reason=reason or ("account created" if created else "Slurm limits differed from quota"),
    )
    return change


def quotas_sync(*, actor=None) -> dict[str, dict]:
    """Sync every active team's account (the beat task; also corrects edits made in Slurm)."""
    report = {}
    for team in Team.objects.filter(is_active=True).order_by("slug"):
        with transaction.atomic():
            change = quota_sync_team(team=team, actor=actor)
        if change:
            report[team.slug] = change
    return report


def on_quota_changed(*, quota: Quota, actor=None, **_) -> None:
    """Hook `quota.changed`: push the team's new limits to Slurm (a refusal rolls back)."""
    try:
        quota_sync_team(team=quota.team, actor=actor, reason="quota changed in the portal")
    except SlurmError as error:
        raise _refused("the new limits", error) from error


# --- accounting ----------------------------------------------------------------------------------

IMPORT_USERNAME = "slurm-accounting"
IMPORTED_ARGV = ["(submitted to Slurm directly)"]


def _import_user():
    """The (inactive, password-less) user recorded as submitter of jobs imported from sacct."""
    user, created = User.objects.get_or_create(
        username=IMPORT_USERNAME, defaults={"is_active": False}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def _imported_status(state: SlurmJobState, exit_code: int | None) -> str:
    if state == SlurmJobState.COMPLETED and exit_code in (0, None):
        return JobStatus.SUCCEEDED
    if state == SlurmJobState.CANCELLED:
        return JobStatus.CANCELLED
    return JobStatus.FAILED


def accounting_import(
    *, start: datetime | None = None, end: datetime | None = None, now: datetime | None = None
) -> dict[str, int]:
    """Import finished jobs from `sacct` that the portal did not submit (plain sbatch on the
    cluster): each becomes a finished portal job of the team whose slug is its account, with
    its GPUs (from AllocTRES) allocated on its nodes for the time it ran, so the billing meter
    charges it like any job. Keyed by (cluster, Slurm job id): importing again adds nothing.
    Jobs of accounts that are no team, or without GPUs, are recorded but not charged."""
    now = now or timezone.now()
    start = start or now - timedelta(hours=settings.SLURM_ACCOUNTING_LOOKBACK_HOURS)
    cluster = cluster_name()
    records = [
        r
        for r in client().accounting(start=start, end=end or now)
        if job_state(r.state) in FINISHED_STATES and r.start and r.end
    ]
    known = set(
        SlurmJob.objects.filter(
            cluster=cluster, slurm_job_id__in=[r.job_id for r in records]
        ).values_list("slurm_job_id", flat=True)
    )
    counts = {"imported": 0, "known": 0, "not_charged": 0}
    teams = {t.slug: t for t in Team.objects.filter(slug__in={r.account for r in records})}
    for record in records:
        if record.job_id in known or (record.cluster and record.cluster != cluster):
            counts["known"] += 1
            continue
        state = job_state(record.state)
        types = record.gpu_types
        type_name = next(iter(types), "")
        gpus = record.gpus(type_name or None)
        team = teams.get(record.account)
        with transaction.atomic():
            job = None
            if team is not None and gpus > 0:
                job = Job.objects.create(
                    team=team,
                    submitted_by=_import_user(),
                    name=record.name[:200],
                    argv=IMPORTED_ARGV,
                    gpu_model=_model_for_type(type_name) if type_name else None,
                    gpu_count=gpus,
                    same_node="," not in record.nodes and "[" not in record.nodes,
                    max_runtime_seconds=max(int((record.end - record.start).total_seconds()), 1),
                    status=_imported_status(state, record.exit_code),
                    exit_code=record.exit_code,
                    started_at=record.start,
                    dispatched_at=record.start,
                    finished_at=record.end,
                    pending_message=(
                        f"Imported from Slurm job {record.job_id} ({record.user}, "
                        f"{state.value.lower()})."
                    ),
                )
                # Submitted when Slurm says, not when imported (auto_now_add set it to now).
                Job.objects.filter(pk=job.pk).update(submitted_at=record.submit or record.start)
                job.node = Node.objects.filter(
                    hostname__in=expand_hostlist(record.nodes)[:1]
                ).first()
                job.save(update_fields=["node"])
            SlurmJob.objects.create(
                cluster=cluster,
                slurm_job_id=record.job_id,
                job=job,
                team=team,
                account=record.account,
                user=record.user,
                name=record.name[:200],
                state=state,
                nodes=record.nodes[:500],
                gpu_type=type_name,
                gpus=gpus,
                exit_code=record.exit_code,
                submitted_at=record.submit,
                started_at=record.start,
                ended_at=record.end,
                finished=True,
                polled_at=now,
            )
            if job is None:
                counts["not_charged"] += 1
                continue
            job.refresh_from_db()
            _allocate(
                job,
                indices={},
                nodes=expand_hostlist(record.nodes),
                count=gpus,
                start=record.start,
            )
            JobAllocation.objects.filter(job=job).update(end=record.end, released_at=record.end)
            counts["imported"] += 1
    return counts
