"""The soak's invariant checker (bench.soak.invariants) against planted breaches: it must find a
GPU in two bookings or allocations, GPU-time charged twice, a sample lost or stored twice, a job
run twice or stuck, and a 5xx; and it must find nothing in a clean state, so that a passing soak
means something."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from apps.billing.choices import ChargeSource
from apps.billing.metering import meter_interval
from apps.billing.services import period_get_or_create
from apps.jobs.choices import JobStatus
from apps.jobs.models import JobAllocation
from apps.telemetry.ingest import telemetry_ingest
from bench.soak import invariants as inv
from tests.factories import (
    JobFactory,
    RateCardFactory,
    TeamFactory,
    UserFactory,
    make_booking,
    make_node_with_gpus,
)

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 2, 9, tzinfo=UTC)


@pytest.fixture
def gpus():
    node = make_node_with_gpus("soak-node", 2)
    return list(node.gpus.order_by("index"))


@pytest.fixture
def team():
    return TeamFactory()


def _job(team, status=JobStatus.SUCCEEDED, **fields):
    return JobFactory(team=team, status=status, **fields)


def _allocate(job, gpu, start, end, attempt=1):
    return JobAllocation.objects.create(
        job=job, gpu=gpu, attempt=attempt, start=start, end=end, released_at=end
    )


def _drop_constraint(table: str, *, kind: str = "", name: str = "") -> None:
    """Plant what the database would refuse: drop the constraint inside the test's transaction
    (rolled back with it)."""
    with connection.cursor() as cursor:
        if not name:
            cursor.execute(
                "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = %s",
                [table, kind],
            )
            name = cursor.fetchone()[0]
        cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')


def test_clean_state_breaks_no_invariant(gpus, team):
    user = UserFactory()
    booking = make_booking(team, user, gpus[:1], T0, T0 + timedelta(hours=1))
    inside = _job(team, reservation=booking)
    _allocate(inside, gpus[0], T0, T0 + timedelta(minutes=30))
    first, second = _job(team), _job(team)
    _allocate(first, gpus[1], T0, T0 + timedelta(minutes=20))
    _allocate(second, gpus[1], T0 + timedelta(minutes=20), T0 + timedelta(minutes=50))
    RateCardFactory(gpu_model=gpus[0].model)
    meter_interval(start=T0, end=T0 + timedelta(hours=2), now=T0 + timedelta(hours=2))
    ts = T0.timestamp() + 0.123457
    batch = {"node": "soak-node", "seq": 1, "samples": [{"uuid": gpus[0].uuid, "ts": ts}]}
    assert telemetry_ingest(batch=batch, now=T0).stored == 1

    checks = [
        inv.bookings_overlap(),
        inv.allocations_overlap(),
        inv.allocations_in_foreign_bookings(),
        inv.gpu_time_charged_twice(),
        *inv.samples_stored_once({inv.sample_key(gpus[0].uuid, ts): 1}),
        inv.jobs_stuck(),
    ]

    assert [c.name for c in checks if not c.ok] == []
    assert all(c.checked > 0 for c in checks)


def test_gpu_in_two_overlapping_bookings_is_found(gpus, team):
    _drop_constraint("reservations_reservationgpu", kind="x")
    user = UserFactory()
    make_booking(team, user, gpus[:1], T0, T0 + timedelta(hours=2))
    make_booking(team, user, gpus[:1], T0 + timedelta(hours=1), T0 + timedelta(hours=3))
    make_booking(team, user, gpus[:1], T0 + timedelta(hours=3), T0 + timedelta(hours=4))

    assert inv.bookings_overlap().violations == 1


def test_gpu_in_two_overlapping_allocations_is_found(gpus, team):
    first, second = _job(team), _job(team)
    _allocate(first, gpus[0], T0, T0 + timedelta(minutes=30))
    _allocate(second, gpus[0], T0 + timedelta(minutes=29), T0 + timedelta(minutes=40))
    # the same job's next attempt on the same GPU while the first is not released
    unreleased = _job(team)
    JobAllocation.objects.create(job=unreleased, gpu=gpus[1], attempt=1, start=T0, end=T0)
    _allocate(unreleased, gpus[1], T0 + timedelta(minutes=5), T0 + timedelta(minutes=9), 2)

    assert inv.allocations_overlap().violations == 2


def test_job_inside_another_booking_is_found(gpus, team):
    make_booking(team, UserFactory(), gpus[:1], T0, T0 + timedelta(hours=1))
    _allocate(_job(team), gpus[0], T0 - timedelta(minutes=5), T0 + timedelta(minutes=1))

    assert inv.allocations_in_foreign_bookings().violations == 1


def test_gpu_time_charged_twice_is_found(gpus, team):
    period = period_get_or_create(T0.date().replace(day=1))

    def charge(source, source_id, start, end):
        from apps.billing.models import LedgerEntry

        LedgerEntry.objects.create(
            period=period,
            team=team,
            source=source,
            source_id=source_id,
            gpu=gpus[0],
            gpu_model=gpus[0].model,
            slice_start=start,
            slice_end=end,
            gpu_seconds=int((end - start).total_seconds()),
            cost=0,
        )

    charge(ChargeSource.JOB, 1, T0, T0 + timedelta(minutes=30))
    charge(ChargeSource.UNALLOCATED, 0, T0 + timedelta(minutes=30), T0 + timedelta(hours=1))
    assert inv.gpu_time_charged_twice().ok
    charge(ChargeSource.RESERVATION, 7, T0 + timedelta(minutes=10), T0 + timedelta(minutes=20))

    check = inv.gpu_time_charged_twice()
    assert check.violations == 1
    assert "job 1 and reservation 7" in check.examples[0]
    assert not inv.remetering_inserted(3, 10).ok


def test_sample_lost_or_stored_twice_is_found(gpus):
    _drop_constraint("telemetry_gpusample", name="gpusample_unique_gpu_ts")
    ts = [T0.timestamp() + k * 5.000001 for k in range(3)]
    batch = {
        "node": "soak-node",
        "seq": 1,
        "samples": [{"uuid": gpus[0].uuid, "ts": t} for t in ts[:2]],
    }
    telemetry_ingest(batch=batch, now=T0)
    with connection.cursor() as cursor:  # a second copy of the first sample
        cursor.execute(
            "INSERT INTO telemetry_gpusample (gpu_id, ts) SELECT gpu_id, ts FROM "
            "telemetry_gpusample ORDER BY ts LIMIT 1"
        )
    sent = {inv.sample_key(gpus[0].uuid, t): 1 for t in ts}  # the third never arrived

    stored, twice, resent = inv.samples_stored_once(sent)

    assert (stored.checked, stored.violations) == (3, 1)
    assert (twice.checked, twice.violations) == (3, 1)
    assert resent.ok


def test_sent_samples_are_read_from_the_agents_records(tmp_path):
    lines = [{"node": "n", "seq": s, "samples": [["GPU-1", 100.5 + s]]} for s in (1, 2)]
    lines.append({"node": "n", "seq": 3, "samples": [["GPU-1", 101.5]]})
    (tmp_path / "sent-n.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    sent = inv.read_sent(tmp_path)

    assert sent == {inv.sample_key("GPU-1", 101.5): 2, inv.sample_key("GPU-1", 102.5): 1}


def test_unfinished_job_is_stuck(team):
    _job(team)
    _job(team, status=JobStatus.CANCELLED)
    _job(team, status=JobStatus.RUNNING)

    check = inv.jobs_stuck()

    assert (check.checked, check.violations) == (3, 1)


def _run(job, attempt, gpus, start, last, pid=100):
    return inv.Run(job, attempt, pid + attempt, tuple(gpus), start, last)


def test_job_running_twice_and_gpu_shared_are_found(tmp_path):
    record = {"job": "4", "attempt": "2", "pid": 9, "gpus": "GPU-a,GPU-b", "start": 5, "last": 9}
    (tmp_path / "run-4-2-9.json").write_text(json.dumps(record))
    runs = [
        _run(1, 1, ["GPU-a"], 0.0, 10.0),
        _run(1, 2, ["GPU-c"], 10.0, 20.0),  # after attempt 1: fine
        _run(2, 1, ["GPU-d"], 0.0, 10.0),
        _run(2, 2, ["GPU-e"], 9.0, 15.0),  # while attempt 1 still ran
        *inv.read_runs(tmp_path),  # job 4 on GPU-a while job 1 held it
    ]

    twice = inv.jobs_ran_twice(runs)
    shared = inv.gpus_in_two_processes(runs)

    assert twice.violations == 1 and "job 2" in twice.examples[0]
    assert shared.violations == 1 and "GPU-a" in shared.examples[0]


def test_5xx_other_than_503_with_retry_after_is_found():
    answers = [
        inv.Answer("job submit", 201),
        inv.Answer("job submit", 503, retry_after=True),
        inv.Answer("job list", 503),
        inv.Answer("booking create", 500),
        inv.Answer("healthz", 0, error="ReadTimeout"),
    ]

    errors, unanswered = inv.server_errors(answers)

    assert (errors.checked, errors.violations) == (5, 2)
    assert unanswered.violations == 1
    assert "FAIL" in inv.table([errors, unanswered])
