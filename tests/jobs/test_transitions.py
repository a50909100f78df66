"""The job lifecycle table and the one function every status change goes through."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.fleet.models import Node
from apps.jobs.choices import FINISHED_STATUSES, WAITING_STATUSES, JobStatus
from apps.jobs.models import Job
from apps.jobs.transitions import (
    INITIAL_STATUSES,
    JOB_TRANSITIONS,
    IllegalJobTransition,
    initial_job_status,
    job_transition,
    job_transition_allowed,
)
from portal.exceptions import ConflictError

AT = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
BEFORE = AT - timedelta(minutes=10)

ALLOWED = {(src, dst) for src, targets in JOB_TRANSITIONS.items() for dst in targets}
ILLEGAL = sorted(
    (src, dst) for src in JobStatus.values for dst in JobStatus.values if (src, dst) not in ALLOWED
)


def job_in(status, **fields) -> Job:
    values = {
        "pk": 7,
        "status": status,
        "dispatched_at": BEFORE,
        "started_at": BEFORE,
        "exit_code": 3,
        "pending_reason": "quota",
        "pending_message": "Waiting for quota.",
        "estimated_start": AT + timedelta(hours=1),
        "reclaim_since": BEFORE,
        "node": Node(pk=1, hostname="gpu-01"),
    }
    values.update(fields)
    return Job(**values)


def test_the_table_names_every_status_and_finished_jobs_go_nowhere():
    assert set(JOB_TRANSITIONS) == set(JobStatus.values)
    for status in FINISHED_STATUSES:
        assert JOB_TRANSITIONS[status] == frozenset()
    for status in JobStatus.values:
        assert status not in JOB_TRANSITIONS[status], f"{status} -> itself is not a change"


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (JobStatus.SUCCEEDED, JobStatus.RUNNING),
        (JobStatus.FAILED, JobStatus.REQUEUED),
        (JobStatus.CANCELLED, JobStatus.QUEUED),
        (JobStatus.RUNNING, JobStatus.DISPATCHED),
        (JobStatus.RUNNING, JobStatus.QUEUED),
        (JobStatus.QUEUED, JobStatus.PREEMPTED),
        (JobStatus.QUEUED, JobStatus.REQUEUED),
        (JobStatus.PREEMPTED, JobStatus.RUNNING),
        (JobStatus.PREEMPTED, JobStatus.DISPATCHED),
    ],
)
def test_moves_the_lifecycle_never_makes_are_not_in_the_table(src, dst):
    assert not job_transition_allowed(src, dst)


@pytest.mark.parametrize(("src", "dst"), ILLEGAL)
def test_every_illegal_move_raises_and_leaves_the_job_as_it_was(src, dst):
    job = job_in(src)
    before = {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields}
    with pytest.raises(IllegalJobTransition) as refused:
        job_transition(job, dst, at=AT, message="never written")
    assert refused.value.message == f"Job #7 cannot go from {src} to {dst}."
    assert refused.value.detail == {"job": 7, "from": src, "to": dst}
    assert {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields} == before


def test_an_illegal_move_is_a_conflict_for_api_clients():
    with pytest.raises(ConflictError) as refused:
        job_transition(job_in(JobStatus.SUCCEEDED), JobStatus.RUNNING, at=AT)
    assert refused.value.code == "illegal_job_transition"
    assert refused.value.status_code == 409


@pytest.mark.parametrize("src", WAITING_STATUSES)
def test_dispatch_stamps_the_dispatch_and_ends_the_wait(src):
    job = job_in(src, dispatched_at=None, started_at=None)
    fields = job_transition(job, JobStatus.DISPATCHED, at=AT)
    assert (job.status, job.dispatched_at, job.started_at) == (JobStatus.DISPATCHED, AT, None)
    assert (job.pending_reason, job.pending_message, job.estimated_start) == ("", "", None)
    assert job.reclaim_since is None  # the wait its guarantee's clock timed is over
    assert {"status", "dispatched_at", "started_at", "pending_message", "reclaim_since"} <= set(
        fields
    )


def test_start_after_a_dispatch_keeps_the_dispatch_time():
    job = job_in(JobStatus.DISPATCHED, started_at=None, pending_message="")
    fields = job_transition(job, JobStatus.RUNNING, at=AT)
    assert (job.status, job.dispatched_at, job.started_at) == (JobStatus.RUNNING, BEFORE, AT)
    assert {"status", "started_at", "dispatched_at"} <= set(fields)


def test_a_backend_that_starts_a_waiting_job_itself_dispatches_it_at_its_start():
    job = job_in(JobStatus.QUEUED, dispatched_at=None, started_at=None)
    job_transition(job, JobStatus.RUNNING, at=AT)
    assert (job.dispatched_at, job.started_at) == (AT, AT)
    assert (job.pending_reason, job.pending_message, job.estimated_start) == ("", "", None)


def test_requeue_clears_the_attempt_for_the_next_one():
    job = job_in(JobStatus.RUNNING)
    fields = job_transition(job, JobStatus.REQUEUED, at=AT, message="Requeued (node lost).")
    assert job.status == JobStatus.REQUEUED
    assert (job.node, job.dispatched_at, job.started_at, job.exit_code) == (None, None, None, None)
    assert job.finished_at is None and job.reclaim_since is None  # a new wait, a new clock
    assert job.pending_message == "Requeued (node lost)."
    assert {"node", "dispatched_at", "started_at", "exit_code", "pending_message"} <= set(fields)


def test_preemption_is_not_an_end():
    job = job_in(JobStatus.RUNNING, finished_at=AT)
    job_transition(job, JobStatus.PREEMPTED, at=AT, message="Preempted.")
    assert (job.status, job.finished_at, job.started_at) == (JobStatus.PREEMPTED, None, BEFORE)


@pytest.mark.parametrize("end", FINISHED_STATUSES)
def test_an_end_stamps_finished_at_and_keeps_the_run_times(end):
    job = job_in(JobStatus.RUNNING, pending_message="")
    fields = job_transition(job, end, at=AT)
    assert (job.status, job.finished_at) == (end, AT)
    assert (job.dispatched_at, job.started_at, job.exit_code) == (BEFORE, BEFORE, 3)
    assert (job.pending_reason, job.estimated_start, job.reclaim_since) == ("", None, None)
    assert "finished_at" in fields


def test_a_message_is_left_alone_unless_given_when_not_leaving_the_queue():
    job = job_in(JobStatus.PREEMPTED, pending_message="Preempted for job #3.")
    job_transition(job, JobStatus.CANCELLED, at=AT)
    assert job.pending_message == "Preempted for job #3."


def test_new_jobs_start_queued_or_as_a_record_of_a_finished_one():
    assert {JobStatus.QUEUED, *FINISHED_STATUSES} == INITIAL_STATUSES
    assert initial_job_status(JobStatus.SUCCEEDED) == JobStatus.SUCCEEDED
    for status in (JobStatus.RUNNING, JobStatus.DISPATCHED, JobStatus.PREEMPTED):
        with pytest.raises(ValueError, match=f"cannot be created {status}"):
            initial_job_status(status)


@pytest.mark.django_db
def test_the_fields_returned_save_the_whole_move(team, member):
    job = Job.objects.create(
        team=team,
        submitted_by=member,
        argv=["python", "train.py"],
        gpu_count=1,
        max_runtime_seconds=60,
        status=initial_job_status(JobStatus.QUEUED),
        pending_reason="quota",
        pending_message="Waiting for quota.",
        estimated_start=AT,
        reclaim_since=BEFORE,
    )
    job.save(update_fields=job_transition(job, JobStatus.RUNNING, at=AT))
    job.refresh_from_db()
    assert (job.status, job.started_at, job.dispatched_at) == (JobStatus.RUNNING, AT, AT)
    assert (job.pending_reason, job.pending_message, job.estimated_start) == ("", "", None)
    assert job.reclaim_since is None
