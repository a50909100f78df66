"""Jobs submitted to Slurm directly, imported from its accounting so they are charged."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.fleet.models import Node
from apps.integrations.slurm.choices import (
    FINISHED_STATES,
    job_state,
)
from apps.integrations.slurm.client import (
    expand_hostlist,
)
from apps.integrations.slurm.models import SlurmJob
from apps.integrations.slurm.services.common import _model_for_type, client, cluster_name
from apps.integrations.slurm.services.jobs import _allocate, finished_status
from apps.jobs.models import Job
from apps.jobs.services import close_allocations, release_job_allocations
from apps.jobs.transitions import initial_job_status
from apps.teams.models import Team, User

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
                    status=initial_job_status(finished_status(state, record.exit_code)),
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
            close_allocations(job, now=record.end)
            release_job_allocations(job, now=record.end)
            counts["imported"] += 1
    return counts
