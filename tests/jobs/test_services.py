"""Jobs services: submit validation, cancel, agent reports, requeue on lost nodes."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.fleet.choices import NodeStatus
from apps.fleet.models import Gpu, GpuModel, Node
from apps.jobs import services
from apps.jobs.choices import JobStatus
from apps.jobs.dispatch import schedule_cycle
from apps.jobs.models import Job, JobAllocation
from apps.reservations.models import Reservation
from portal.exceptions import ConflictError, PolicyRefusal

pytestmark = pytest.mark.django_db


def submit(member, team, **kwargs):
    data = {"argv": ["python", "train.py"], "gpu_count": 2, "max_runtime_seconds": 3600}
    data.update(kwargs)
    return services.job_submit(actor=member, team=team, **data)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"argv": []}, "argv"),
        ({"argv": "python train.py"}, "argv"),
        ({"argv": ["python", 3]}, "argv"),
        ({"argv": [""]}, "argv"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": {"A-B": "x"}}, "env"),
        ({"env": {"OK": 3}}, "env"),
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env"),
        ({"gpu_count": 0}, "gpu_count"),
        ({"gpu_count": 17}, "gpu_count"),  # more than the fleet has, on any number of nodes
        ({"gpu_count": 17, "same_node": False}, "gpu_count"),  # fleet has 16 H100
        ({"max_runtime_seconds": 10**9}, "max_runtime_seconds"),
        ({"max_runtime_seconds": 0}, "max_runtime_seconds"),
        ({"priority_class": "vip"}, "priority_class"),
    ],
)
def test_submit_refuses_bad_input(member, team, h100, kwargs, field):
    kwargs.setdefault("gpu_model", h100)
    with pytest.raises(ValidationError) as error:
        submit(member, team, **kwargs)
    assert field in error.value.message_dict
    assert not Job.objects.exists()


def test_submit_across_nodes_within_fleet(member, team, h100, sent):
    job = submit(member, team, gpu_model=h100, gpu_count=12, same_node=False)
    assert job.status == JobStatus.QUEUED and job.gpu_count == 12


def test_submit_by_outsider_is_refused(outsider, team, fleet):
    with pytest.raises(PolicyRefusal):
        submit(outsider, team)


def test_submit_with_reservation_of_other_team_or_too_small(
    member, team, other_team, outsider, h100, tomorrow_9
):
    theirs = Reservation.objects.create(
        team=other_team,
        created_by=outsider,
        gpu_model=h100,
        count=4,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=2),
    )
    ours = Reservation.objects.create(
        team=team,
        created_by=member,
        gpu_model=h100,
        count=2,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=2),
    )
    with pytest.raises(ValidationError) as error:
        submit(member, team, reservation=theirs)
    assert "reservation" in error.value.message_dict
    with pytest.raises(ValidationError) as error:
        submit(member, team, reservation=ours, gpu_count=3)
    assert "gpu_count" in error.value.message_dict
    job = submit(member, team, reservation=ours, gpu_count=2)
    assert job.gpu_model == h100  # taken from the reservation


def _running_job(member, team, h100, sent, **kwargs):
    job = submit(member, team, gpu_model=h100, **kwargs)
    schedule_cycle()
    job.refresh_from_db()
    assert job.status == JobStatus.DISPATCHED
    services.job_report(report={"job_id": job.pk, "attempt": 1, "event": "started"})
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    return job


def test_cycle_places_and_sends_launch_once(member, team, h100, quotas, sent):
    job = submit(member, team, gpu_model=h100)
    first = schedule_cycle()
    second = schedule_cycle()
    assert first.placed == [job.pk] and second.placed == []
    launches = [m for m in sent if m[0] == "agent.launch"]
    assert len(launches) == 1  # written to the outbox with the placement, once
    assert JobAllocation.objects.filter(job=job, end__isnull=True).count() == 2
    job.refresh_from_db()
    assert job.node is not None and job.dispatched_at is not None


def test_cycle_sends_launch_with_gpu_uuids_on_commit(
    member, team, h100, quotas, sent, django_capture_on_commit_callbacks
):
    job = submit(member, team, gpu_model=h100)
    with django_capture_on_commit_callbacks(execute=True):
        schedule_cycle()
    launches = [m for m in sent if m[0] == "agent.launch"]
    assert len(launches) == 1
    name, host, (spec,) = launches[0]
    job.refresh_from_db()
    assert host == job.node.hostname
    assert spec["job_id"] == job.pk and spec["attempt"] == 1 and spec["argv"] == job.argv
    uuids = set(Gpu.objects.filter(job_allocations__job=job).values_list("uuid", flat=True))
    assert set(spec["gpu_uuids"]) == uuids and len(uuids) == 2


def test_cycle_explains_pending_jobs(member, team, h100, quotas, sent):
    for node in Node.objects.filter(hostname__startswith="h100"):
        node.status = NodeStatus.DRAINED
        node.save()
    job = submit(member, team, gpu_model=h100)
    result = schedule_cycle()
    job.refresh_from_db()
    assert result.placed == []
    assert job.status == JobStatus.QUEUED
    assert job.pending_reason and job.pending_message


def test_finished_report_closes_allocations(member, team, h100, quotas, sent):
    job = _running_job(member, team, h100, sent)
    services.job_report(
        report={
            "job_id": job.pk,
            "attempt": 1,
            "event": "finished",
            "exit_code": 0,
            "log_tail": "ok",
        }
    )
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.log_tail == "ok"
    assert not JobAllocation.objects.filter(job=job, end__isnull=True).exists()
    # A second report for the finished job is ignored.
    assert (
        services.job_report(
            report={"job_id": job.pk, "attempt": 1, "event": "finished", "exit_code": 1}
        )
        == "ignored"
    )
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_a_log_tail_postgresql_cannot_store_is_kept_escaped_and_the_job_finishes(
    member, team, h100, quotas, sent
):
    """A program that prints a NUL byte made the finished report fail to store, so the job
    never finished; a node name with one is a malformed report, ignored."""
    job = _running_job(member, team, h100, sent)
    report = {"job_id": job.pk, "attempt": 1, "event": "finished", "exit_code": 0}
    assert services.job_report(report={**report, "node": "h100-a\x00"}) == "ignored"
    services.job_report(report={**report, "log_tail": "step 9\x00 loss \udcff"})
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert job.log_tail == "step 9\\x00 loss \\udcff"


def test_failed_exit_code(member, team, h100, quotas, sent):
    job = _running_job(member, team, h100, sent)
    services.job_report(
        report={"job_id": job.pk, "attempt": 1, "event": "finished", "exit_code": 2}
    )
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.exit_code == 2


def test_reports_for_unknown_jobs_or_old_attempts_are_ignored(
    member, team, h100, quotas, sent, caplog
):
    assert services.job_report(report={"job_id": 999999, "event": "started"}) == "ignored"
    assert "unknown job" in caplog.text
    assert services.job_report(report={"nonsense": True}) == "ignored"
    job = _running_job(member, team, h100, sent)
    assert (
        services.job_report(report={"job_id": job.pk, "attempt": 7, "event": "finished"})
        == "ignored"
    )
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


def test_cancel_running_job_kills_and_frees(
    member, team, h100, quotas, sent, django_capture_on_commit_callbacks
):
    job = _running_job(member, team, h100, sent)
    with django_capture_on_commit_callbacks(execute=True):
        services.job_cancel(job=job, actor=member)
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert not JobAllocation.objects.filter(job=job, end__isnull=True).exists()
    kills = [m for m in sent if m[0] == "agent.kill"]
    assert kills == [("agent.kill", job.node.hostname, (job.pk, 1, 30))]
    with pytest.raises(ConflictError):
        services.job_cancel(job=job, actor=member)
    assert not AuditEvent.objects.filter(action="job.cancel").exists()


def test_admin_cancel_is_audited(member, team, h100, platform_admin, sent):
    job = submit(member, team, gpu_model=h100)
    services.job_cancel(job=job, actor=platform_admin, reason="runaway")
    assert AuditEvent.objects.get(action="job.cancel").reason == "runaway"


def test_node_lost_requeues_then_fails_after_max(member, team, h100, quotas, sent, settings):
    settings.JOBS_MAX_REQUEUES = 2
    job = _running_job(member, team, h100, sent)
    for expected in (1, 2):
        node = job.node
        requeued = services.jobs_requeue_for_node(node=node)
        job.refresh_from_db()
        assert requeued == [job.pk]
        assert job.status == JobStatus.REQUEUED and job.requeue_count == expected
        assert not JobAllocation.objects.filter(job=job, end__isnull=True).exists()
        schedule_cycle()
        job.refresh_from_db()
        assert job.status == JobStatus.DISPATCHED
        assert (
            JobAllocation.objects.filter(job=job, attempt=expected + 1, end__isnull=True).count()
            == 2
        )
    services.jobs_requeue_for_node(node=job.node)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert not JobAllocation.objects.filter(job=job, end__isnull=True).exists()
    # Every attempt's allocations are closed and never overlap: nothing is billed twice.
    allocs = list(JobAllocation.objects.filter(job=job).order_by("start"))
    assert len(allocs) == 6 and all(a.end is not None for a in allocs)


def test_telemetry_unreachable_requeues_jobs(
    member, team, h100, quotas, sent, settings, drain_listening
):
    from apps.telemetry.services import nodes_mark_unreachable

    job = _running_job(member, team, h100, sent)
    Node.objects.update(last_seen=timezone.now() - timedelta(hours=1))
    nodes_mark_unreachable()
    job.refresh_from_db()
    assert job.status == JobStatus.REQUEUED and job.requeue_count == 1


def test_preempt_then_requeue_on_finished_report(member, team, h100, quotas, sent, platform_admin):
    job = _running_job(member, team, h100, sent)
    services.job_preempt(job=job, actor=platform_admin)
    job.refresh_from_db()
    assert job.status == JobStatus.PREEMPTED
    assert AuditEvent.objects.filter(action="job.preempt").exists()
    services.job_report(
        report={"job_id": job.pk, "attempt": 1, "event": "finished", "exit_code": -15}
    )
    job.refresh_from_db()
    assert job.status == JobStatus.REQUEUED and job.attempt == 2
    assert not JobAllocation.objects.filter(job=job, end__isnull=True).exists()
    with pytest.raises(ConflictError):
        services.job_preempt(job=job)


def test_model_without_gpus_is_refused(member, team, fleet):
    GpuModel.objects.create(name="B200", memory_mib=1)
    with pytest.raises(ValidationError):
        submit(member, team, gpu_model=GpuModel.objects.get(name="B200"), gpu_count=1)


def test_stale_dispatch_is_requeued_and_overdue_run_failed(member, team, h100, quotas, sent):
    stuck = submit(member, team, gpu_model=h100)
    overdue = submit(member, team, gpu_model=h100, max_runtime_seconds=60)
    schedule_cycle()
    services.job_report(report={"job_id": overdue.pk, "attempt": 1, "event": "started"})
    assert services.jobs_expire_stale() == {"requeued": [], "failed": []}
    later = timezone.now() + timedelta(minutes=10)
    assert services.jobs_expire_stale(now=later) == {"requeued": [stuck.pk], "failed": [overdue.pk]}
    stuck.refresh_from_db()
    overdue.refresh_from_db()
    assert stuck.status == JobStatus.REQUEUED and stuck.requeue_count == 1
    assert overdue.status == JobStatus.FAILED
    assert not JobAllocation.objects.filter(end__isnull=True).exists()


def test_any_model_job_must_fit_one_model(member, team, fleet, sent):
    # 16 H100 + 4 L40S: 20 GPUs, but a job's GPUs are of one model.
    with pytest.raises(ValidationError) as error:
        submit(member, team, gpu_count=17, same_node=False)
    assert "16" in str(error.value.message_dict["gpu_count"])
    assert submit(member, team, gpu_count=16, same_node=False).gpu_model is None


def test_report_from_another_node_is_ignored(member, team, h100, quotas, sent):
    job = _running_job(member, team, h100, sent)
    other = "h100-b" if job.node.hostname == "h100-a" else "h100-a"
    report = {"job_id": job.pk, "attempt": 1, "event": "finished", "exit_code": 0}
    assert services.job_report(report={**report, "node": other}) == "ignored"
    assert services.job_report(report={**report, "node": job.node.hostname}) == "succeeded"
