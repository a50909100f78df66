"""Jobs submitted to Slurm directly (plain sbatch) imported from sacct and charged; slurm_check."""

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from apps.billing.choices import ChargeSource
from apps.billing.metering import floor_hour, meter_interval
from apps.billing.models import LedgerEntry, RateCard
from apps.integrations.slurm import services
from apps.integrations.slurm.models import SlurmJob
from apps.jobs.choices import JobStatus
from apps.jobs.models import Job
from tests.integrations.slurm.conftest import slurm_out, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def plain_sbatch(slurm, *options: str) -> int:
    out = slurm_out(
        slurm.cluster,
        "sbatch",
        "--parsable",
        "--output=/dev/null",
        *options,
        "--wrap=sleep 1",
    )
    return int(out.strip().split(";")[0])


def finished_in_sacct(slurm, job_id: int) -> bool:
    out = slurm_out(slurm.cluster, "sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State")
    return out.strip() in ("COMPLETED", "FAILED", "CANCELLED")


def finished_since(slurm, since) -> set[int]:
    out = slurm_out(
        slurm.cluster,
        "sacct",
        "-n",
        "-X",
        "-P",
        "--allusers",
        f"--starttime={since:%Y-%m-%dT%H:%M:%S}",
        "-o",
        "JobID,State",
    )
    return {
        int(job_id)
        for job_id, _, state in (line.partition("|") for line in out.splitlines())
        if job_id.isdigit() and state in ("COMPLETED", "FAILED", "CANCELLED")
    }


def test_job_submitted_with_plain_sbatch_is_imported_once_and_charged_to_its_team(slurm):
    RateCard.objects.create(
        gpu_model=slurm.model,
        price_per_gpu_hour=Decimal("3.6000"),
        effective_from=timezone.now() - timedelta(days=1),
    )
    # Earlier tests' Slurm jobs are in sacct too (their portal rows were rolled back): look
    # only from now on.
    since = timezone.now().replace(microsecond=0)
    slurm_id = plain_sbatch(slurm, "--account=vision", "--gres=gpu:h100:3", "--job-name=direct")
    cpu_only = plain_sbatch(slurm, "--account=vision", "--job-name=cpu-only")
    # slurmdbd answers time-window queries (what the import asks) a few seconds after it
    # answers by job id; in production the import's look-back covers that lag.
    wait_for(
        lambda: {slurm_id, cpu_only} <= finished_since(slurm, since),
        what="sacct to record both jobs",
    )

    counts = services.accounting_import(start=since)
    assert counts["imported"] == 1
    assert counts["not_charged"] == 1  # no GPUs: recorded, nothing to charge
    record = SlurmJob.objects.get(cluster="portaltest", slurm_job_id=slurm_id)
    job = record.job
    assert job.team == slurm.team
    assert job.status == JobStatus.SUCCEEDED
    assert job.gpu_count == 3 and job.gpu_model == slurm.model
    assert job.name == "direct"
    assert record.user == slurm.cluster.user
    allocations = list(job.allocations.all())
    assert len(allocations) == 3
    assert all(a.start == record.started_at and a.end == record.ended_at for a in allocations)
    assert SlurmJob.objects.get(slurm_job_id=cpu_only).job is None

    # Importing again (the next beat run overlaps the window) adds nothing.
    again = services.accounting_import(start=since)
    assert again == {"imported": 0, "known": 2, "not_charged": 0}
    assert Job.objects.filter(slurm__slurm_job_id=slurm_id).count() == 1

    hour = floor_hour(record.started_at)
    meter_interval(start=hour, end=hour + timedelta(hours=2), now=hour + timedelta(hours=3))
    charged = LedgerEntry.objects.filter(source=ChargeSource.JOB, source_id=job.pk)
    ran = int((record.ended_at - record.started_at).total_seconds())
    assert {e.team_id for e in charged} == {slurm.team.pk}
    assert sum(e.gpu_seconds for e in charged) == 3 * ran


def test_portal_jobs_are_not_imported_twice(slurm):
    from apps.jobs.services import job_submit

    job = job_submit(
        actor=slurm.member,
        team=slurm.team,
        argv=["/bin/true"],
        gpu_count=1,
        gpu_model=slurm.model,
        max_runtime_seconds=60,
    )
    wait_for(lambda: finished_in_sacct(slurm, job.slurm.slurm_job_id), what="the job to end")
    services.accounting_import()
    # Its record is the portal job's own; no imported copy of it appears.
    assert SlurmJob.objects.get(slurm_job_id=job.slurm.slurm_job_id).job == job
    assert not Job.objects.filter(name=f"portal-{job.pk}", argv=services.IMPORTED_ARGV).exists()


def test_slurm_check_says_what_it_reaches(slurm):
    out = StringIO()
    call_command("slurm_check", stdout=out)
    text = out.getvalue()
    assert "ok   slurmctld answers" in text
    assert "ok   cluster name: portaltest" in text
    assert "ok   GPU model H100-SXM-80GB is gres type 'h100'" in text
    assert "ok   teams with a Slurm account (1 of 1)" in text


def test_slurm_check_names_what_it_cannot_reach(slurm, settings):
    settings.SLURM_GPU_TYPES = {slurm.model.name: "a100"}
    settings.SLURM_BIN_DIR = "/nonexistent"
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("slurm_check", stdout=out)
    text = out.getvalue()
    assert "FAIL sbatch runs: sbatch was not found (SLURM_BIN_DIR=/nonexistent)." in text
    assert "FAIL slurmctld answers" in text


def test_slurm_check_reports_limits_that_drifted_from_the_quota(slurm):
    slurm_out(
        slurm.cluster, "sacctmgr", "-i", "modify", "account", "where", "name=vision", "set",
        "GrpTRES=gres/gpu:h100=99",
    )  # fmt: skip
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("slurm_check", stdout=out)
    assert (
        "FAIL limits of vision match its quota: Slurm has GrpTRES=gres/gpu:h100=99 Fairshare=4, "
        "the quota gives GrpTRES=gres/gpu:h100=8 Fairshare=4"
    ) in out.getvalue()
