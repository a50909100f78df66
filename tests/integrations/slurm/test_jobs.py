"""Portal jobs executed by a real Slurm: sbatch, squeue/sacct polling, scancel, pending reasons."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from apps.billing.choices import ChargeSource
from apps.billing.metering import floor_hour, meter_interval
from apps.billing.models import LedgerEntry, RateCard
from apps.integrations.slurm import services
from apps.integrations.slurm.choices import PENDING_REASONS, SlurmJobState
from apps.integrations.slurm.models import SlurmJob
from apps.jobs import dispatch
from apps.jobs.choices import JobStatus
from apps.jobs.models import Job
from apps.jobs.services import job_cancel, job_submit
from apps.teams.services import quota_set
from tests.factories import MembershipFactory, PlatformAdminFactory, TeamFactory
from tests.integrations.slurm.conftest import slurm_out, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=False)]


def submit(slurm, argv, *, gpus=1, runtime=120, team=None, user=None, **extra) -> Job:
    return job_submit(
        actor=user or slurm.member,
        team=team or slurm.team,
        argv=argv,
        gpu_count=gpus,
        gpu_model=slurm.model,
        max_runtime_seconds=runtime,
        **extra,
    )


def poll_until(job: Job, *statuses, timeout: float = 40) -> Job:
    def done():
        services.jobs_poll()
        job.refresh_from_db()
        return job.status in statuses

    wait_for(done, timeout=timeout, what=f"job {job.pk} to be {'/'.join(statuses)}")
    return job


def test_portal_job_runs_in_slurm_under_team_account_and_succeeds_with_its_cost_in_ledger(slurm):
    RateCard.objects.create(
        gpu_model=slurm.model,
        price_per_gpu_hour=Decimal("3.6000"),
        effective_from=timezone.now() - timedelta(days=1),
    )
    job = submit(slurm, ["/bin/sh", "-c", "echo hello from $1; sleep 2", "sh", "slurm"], gpus=2)

    mapping = SlurmJob.objects.get(job=job)
    shown = slurm_out(slurm.cluster, "scontrol", "-o", "show", "job", str(mapping.slurm_job_id))
    assert "Account=vision" in shown
    assert "gres/gpu:h100=2" in shown
    assert "TimeLimit=00:02:00" in shown
    assert job.pending_message.startswith(f"Submitted to Slurm as job {mapping.slurm_job_id}")

    poll_until(job, JobStatus.SUCCEEDED)
    assert job.exit_code == 0
    assert "hello from slurm" in job.log_tail
    assert job.node == slurm.node
    allocations = list(job.allocations.all())
    assert len(allocations) == 2
    assert all(a.end is not None and a.end >= a.start for a in allocations)
    # The ids map both ways from the database alone.
    assert SlurmJob.objects.get(cluster="portaltest", slurm_job_id=mapping.slurm_job_id).job == job
    assert Job.objects.get(slurm__slurm_job_id=mapping.slurm_job_id) == job

    hour = floor_hour(allocations[0].start)
    meter_interval(start=hour, end=hour + timedelta(hours=2), now=hour + timedelta(hours=3))
    charged = LedgerEntry.objects.filter(source=ChargeSource.JOB, source_id=job.pk)
    gpu_seconds = sum(
        int((a.end - a.start).total_seconds()) for a in allocations
    )  # what Slurm reported, per GPU
    assert charged.exists()
    assert {e.team_id for e in charged} == {slurm.team.pk}
    assert abs(sum(e.gpu_seconds for e in charged) - gpu_seconds) <= 2
    assert sum(e.gpu_cost for e in charged) == pytest.approx(
        Decimal(sum(e.gpu_seconds for e in charged)) / 1000, abs=Decimal("0.000001")
    )


def test_the_portal_scheduler_does_not_place_jobs_with_the_slurm_backend(slurm):
    job = submit(slurm, ["/bin/sleep", "30"])
    result = dispatch.schedule_cycle()
    assert result.placed == []
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert not job.allocations.exists()


def test_failing_job_is_failed_with_slurms_exit_code(slurm):
    job = submit(slurm, ["/bin/sh", "-c", "echo broken >&2; exit 3"])
    poll_until(job, JobStatus.FAILED)
    assert job.exit_code == 3
    assert "broken" in job.log_tail
    assert SlurmJob.objects.get(job=job).state == SlurmJobState.FAILED


def test_cancel_in_the_portal_is_scancel(slurm):
    job = submit(slurm, ["/bin/sleep", "300"], runtime=600)
    poll_until(job, JobStatus.RUNNING)
    slurm_id = job.slurm.slurm_job_id
    job_cancel(job=job, actor=slurm.member)

    def cancelled_in_slurm():
        out = slurm_out(
            slurm.cluster, "sacct", "-n", "-X", "-P", "-j", str(slurm_id), "-o", "State"
        )
        return out.strip().startswith("CANCELLED")

    wait_for(cancelled_in_slurm, what="Slurm to cancel the job")
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert all(a.end is not None and a.released_at is not None for a in job.allocations.all())
    services.jobs_poll()  # a later poll leaves the cancelled job alone
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


def test_waiting_job_says_slurms_reason_in_portal_words_and_when_it_should_start(slurm):
    # A limit above the node's 8 GPUs, so the job waits for GPUs, not for the team's limit.
    admin = PlatformAdminFactory()
    quota_set(team=slurm.team, gpu_model=slurm.model, guaranteed=4, limit=16, actor=admin)
    big = submit(slurm, ["/bin/sleep", "300"], gpus=8, runtime=300)
    poll_until(big, JobStatus.RUNNING)
    waiting = submit(slurm, ["/bin/true"], gpus=1, runtime=60)

    def has_reason():
        services.jobs_poll()
        waiting.refresh_from_db()
        return waiting.pending_reason in ("Resources", "Priority") and waiting.estimated_start

    wait_for(has_reason, what="Slurm's pending reason and expected start")
    assert waiting.status == JobStatus.QUEUED
    assert waiting.pending_message == PENDING_REASONS[waiting.pending_reason]
    # Slurm expects it to start when the 8-GPU job's time limit runs out.
    big_end = big.started_at + timedelta(seconds=300)
    assert abs((waiting.estimated_start - big_end).total_seconds()) <= 90

    # The job's page says it in the same words, with the start Slurm expects.
    client = Client()
    client.force_login(slurm.member)
    page = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert PENDING_REASONS[waiting.pending_reason] in page
    assert "Estimated start:" in page


def test_job_over_the_teams_slurm_limit_waits_with_the_quota_sentence(slurm):
    admin = PlatformAdminFactory()
    quota_set(team=slurm.team, gpu_model=slurm.model, guaranteed=1, limit=2, actor=admin)
    first = submit(slurm, ["/bin/sleep", "300"], gpus=2, runtime=300)
    poll_until(first, JobStatus.RUNNING)
    second = submit(slurm, ["/bin/true"], gpus=1)

    def limited():
        services.jobs_poll()
        second.refresh_from_db()
        return second.pending_reason == "AssocGrpGRES"

    wait_for(limited, what="the AssocGrpGRES reason")
    assert "at its GPU limit" in second.pending_message


def test_submit_that_slurm_refuses_is_rolled_back_with_slurms_reason(slurm):
    # A team the cluster has no account for: sbatch refuses, nothing is saved.
    stranger = TeamFactory(slug="no-slurm-account")
    user = MembershipFactory(team=stranger).user
    before = Job.objects.count()
    with pytest.raises(services.SlurmRefused) as refused, transaction.atomic():
        submit(slurm, ["/bin/true"], team=stranger, user=user)
    assert refused.value.code == "slurm_refused"
    assert "account" in refused.value.message.lower()
    assert Job.objects.count() == before
    assert not SlurmJob.objects.exists()


def test_poll_is_bounded_and_running_it_twice_changes_nothing(slurm):
    jobs = [submit(slurm, ["/bin/sleep", "300"], runtime=300) for _ in range(2)]
    for job in jobs:
        poll_until(job, JobStatus.RUNNING)
    assert services.jobs_poll(batch=1)["polled"] == 1
    allocations = sorted(jobs[0].allocations.values_list("gpu_id", "start"))
    services.jobs_poll()
    services.jobs_poll()
    assert sorted(jobs[0].allocations.values_list("gpu_id", "start")) == allocations
    # The two jobs hold different GPUs, as Slurm assigned them.
    held = [set(j.allocations.values_list("gpu__index", flat=True)) for j in jobs]
    assert len(held[0]) == len(held[1]) == 1 and not held[0] & held[1]


def test_slurm_job_ids_are_unique_per_cluster(slurm):
    job = submit(slurm, ["/bin/true"])
    with pytest.raises(IntegrityError), transaction.atomic():
        SlurmJob.objects.create(cluster="portaltest", slurm_job_id=job.slurm.slurm_job_id)


def test_api_submit_answers_409_slurm_refused_with_slurms_words_and_saves_nothing(slurm):
    from tests.conftest import client_for

    stranger = TeamFactory(slug="no-account-api")
    user = MembershipFactory(team=stranger).user
    response = client_for(user).post(
        "/api/v1/jobs/",
        {
            "team": "no-account-api",
            "argv": ["/bin/true"],
            "gpu_model": slurm.model.name,
            "gpu_count": 1,
            "max_runtime_seconds": 60,
        },
        format="json",
    )
    assert response.status_code == 409, response.content
    body = response.json()
    assert body["code"] == "slurm_refused"
    assert body["message"].startswith("Slurm refused the job: ")
    assert "account" in body["message"].lower()
    assert not Job.objects.filter(team=stranger).exists()


def test_beat_tasks_run_against_slurm(slurm):
    from apps.integrations.slurm import tasks

    job = submit(slurm, ["/bin/true"])
    wait_for(
        lambda: tasks.poll()["finished"] == 1 or Job.objects.get(pk=job.pk).is_finished,
        what="the poll task to see the job finish",
    )
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    result = tasks.sync()
    assert set(result) == {"quotas", "reservations", "orphan_jobs", "accounting"}
    assert result["quotas"] == {}  # the fixture synced vision already


def test_reconcile_cancels_portal_marked_slurm_jobs_that_no_portal_job_records(slurm):
    kept = submit(slurm, ["/bin/sleep", "300"], runtime=300)
    # sbatch said yes, then the portal's transaction rolled back: nothing records this one.
    orphan = int(
        slurm_out(
            slurm.cluster,
            "sbatch",
            "--parsable",
            "--account=vision",
            "--output=/dev/null",
            "--comment=portal job 999999",
            "--wrap=sleep 300",
        ).strip()
    )
    assert services.jobs_reconcile()["cancelled"] == []  # too recent: it may still commit
    result = services.jobs_reconcile(older_than=timedelta(0))
    assert result["cancelled"] == [orphan]

    def settled():
        # COMPLETING: Slurm is still stopping the cancelled job's processes.
        states = slurm_out(slurm.cluster, "squeue", "-h", "--states=all", "-o", "%i %T")
        return states if f"{orphan} COMPLETING" not in states else None

    states = wait_for(settled, timeout=60, what="the cancelled job to finish stopping")
    assert f"{orphan} CANCELLED" in states or str(orphan) not in states
    assert f"{kept.slurm.slurm_job_id} CANCELLED" not in states


def test_job_that_slurm_no_longer_knows_is_failed_after_the_lost_delay(slurm, settings):
    settings.SLURM_LOST_AFTER_SECONDS = 600
    job = submit(slurm, ["/bin/sleep", "300"], runtime=300)
    # As if its record had been purged: an id Slurm never gave out.
    SlurmJob.objects.filter(job=job).update(slurm_job_id=999_999)
    now = timezone.now()
    services.jobs_poll(now=now)
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED  # sacct may just lag: not yet
    assert SlurmJob.objects.get(job=job).missing_since == now
    services.jobs_poll(now=now + timedelta(seconds=601))
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.pending_message == "Slurm no longer knows the job; it is marked failed."


def test_job_not_bound_to_one_node_asks_slurm_for_gpus_per_job(slurm):
    job = submit(slurm, ["/bin/true"], gpus=2, same_node=False)
    shown = slurm_out(slurm.cluster, "scontrol", "-o", "show", "job", str(job.slurm.slurm_job_id))
    assert "TresPerJob=gres:gpu:h100:2" in shown
    poll_until(job, JobStatus.SUCCEEDED)
    assert job.allocations.count() == 2


def test_running_jobs_log_follows_slurms_output_file(slurm):
    job = submit(slurm, ["/bin/sh", "-c", "echo step one; sleep 300"], runtime=300)
    poll_until(job, JobStatus.RUNNING)

    def logged():
        services.jobs_poll()
        job.refresh_from_db()
        return "step one" in job.log_tail

    wait_for(logged, what="the output file's tail in the job's log")
    assert job.status == JobStatus.RUNNING


def test_partition_per_gpu_model_is_passed_and_an_unknown_one_is_refused(slurm, settings):
    settings.SLURM_PARTITIONS = {slurm.model.name: "gpu"}
    job = submit(slurm, ["/bin/true"])
    shown = slurm_out(slurm.cluster, "scontrol", "-o", "show", "job", str(job.slurm.slurm_job_id))
    assert "Partition=gpu" in shown

    settings.SLURM_PARTITIONS = {slurm.model.name: "nosuch"}
    with pytest.raises(services.SlurmRefused, match="invalid partition"), transaction.atomic():
        submit(slurm, ["/bin/true"])


def test_a_failed_job_waits_for_accounting_to_record_its_exit_code(slurm, settings, monkeypatch):
    """squeue can show a job FAILED while slurmdbd's record still reads RUNNING with exit code
    0:0 (the completion message is still on its way): the portal keeps the job open until
    accounting has the exit code, instead of recording 0 for a failed job."""
    import dataclasses

    from apps.integrations.slurm.client import QueueEntry, SlurmClient

    settings.SLURM_LOST_AFTER_SECONDS = 600
    job = submit(slurm, ["/bin/sh", "-c", "exit 3"])
    slurm_id = job.slurm.slurm_job_id
    wait_for(
        lambda: "FAILED" in slurm_out(slurm.cluster, "sacct", "-n", "-X", "-P", "-o", "State",
                                      "-j", str(slurm_id)),
        what="the failed job in Slurm's accounting",
    )  # fmt: skip
    real_accounting = SlurmClient.accounting

    def lagging_queue(self, job_ids):
        return {slurm_id: QueueEntry(slurm_id, "FAILED", "NonZeroExitCode", "vm", None)}

    def lagging_accounting(self, **kwargs):
        return [
            dataclasses.replace(r, state="RUNNING", exit_code=0, end=None)
            for r in real_accounting(self, **kwargs)
        ]

    monkeypatch.setattr(SlurmClient, "queue", lagging_queue)
    monkeypatch.setattr(SlurmClient, "accounting", lagging_accounting)
    now = timezone.now()
    services.jobs_poll(now=now)
    job.refresh_from_db()
    assert job.status not in (JobStatus.FAILED, JobStatus.SUCCEEDED) and job.exit_code is None

    monkeypatch.setattr(SlurmClient, "accounting", real_accounting)
    services.jobs_poll(now=now + timedelta(seconds=30))
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.exit_code == 3
