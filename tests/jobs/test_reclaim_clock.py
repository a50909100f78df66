"""The live cycle keeps each waiting job's reclaim clock (``Job.reclaim_since``): its patience
before other teams' over-quota work is stopped for it counts from the first cycle that found it
within its team's unused guarantee, not from its submission, and a rebuilt state counts from the
same time, as the replay does."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs import dispatch, services
from apps.jobs.choices import JobStatus
from apps.jobs.scheduler.state import PendingReason

pytestmark = pytest.mark.django_db

PATIENCE = 600  # JOBS_RECLAIM_PATIENCE_SECONDS's default


def _submit(actor, team, model, gpus, runtime):
    return services.job_submit(actor=actor, team=team, argv=["true"], gpu_model=model,
                               gpu_count=gpus, max_runtime_seconds=runtime)  # fmt: skip


def _report(job, event, at, **extra):
    services.job_report(report={"job_id": job.pk, "attempt": 1, "event": event, **extra}, now=at)


@pytest.fixture
def borrowed_fleet(member, team_admin, team, outsider, other_team, quotas, sent, settings):
    """vision (4 guaranteed H100) runs 2 GPUs of its own; nlp (8 guaranteed) runs 8 of its own
    and borrows the other 6 for ten hours; vision's 4-GPU job then waits over its guarantee
    (2 + 4 > 4) until its own job ends an hour later."""
    settings.JOBS_RECLAIM_PATIENCE_SECONDS = PATIENCE
    h100 = quotas[0].gpu_model
    t0 = timezone.now()
    own = _submit(team_admin, team, h100, 2, 36_000)
    _submit(outsider, other_team, h100, 8, 36_000)
    borrowed = _submit(outsider, other_team, h100, 6, 36_000)
    assert len(dispatch.schedule_cycle(now=t0).placed) == 3
    for job in (own, *other_team.jobs.all()):
        _report(job, "started", t0)
    mine = _submit(member, team, h100, 4, 3600)
    return {"t0": t0, "own": own, "borrowed": borrowed, "mine": mine}


def test_patience_counts_from_when_the_job_comes_within_its_guarantee_not_its_submission(
    borrowed_fleet,
):
    t0, mine, borrowed = borrowed_fleet["t0"], borrowed_fleet["mine"], borrowed_fleet["borrowed"]
    result = dispatch.schedule_cycle(now=t0 + timedelta(seconds=60))
    mine.refresh_from_db()
    assert result.placed == [] and result.preempted == []
    assert mine.reclaim_since is None  # over its guarantee: no clock runs

    # An hour after its submission vision's own job ends: the 4-GPU job is within the
    # guarantee now. nlp's borrowed job (6 GPUs for an hour: more than half the GPU-time the
    # job asks for) yields only after the patience, counted from now, not from the submission.
    t1 = t0 + timedelta(hours=1)
    _report(borrowed_fleet["own"], "finished", t1, exit_code=0)
    result = dispatch.schedule_cycle(now=t1)
    mine.refresh_from_db()
    assert result.placed == [] and result.preempted == []
    assert mine.reclaim_since == t1
    assert mine.pending_reason == PendingReason.RECLAIMING_GUARANTEE

    # Each cycle rebuilds the state from the database: the clock is read back, not restarted.
    result = dispatch.schedule_cycle(now=t1 + timedelta(seconds=PATIENCE - 1))
    mine.refresh_from_db()
    assert result.preempted == [] and mine.reclaim_since == t1

    result = dispatch.schedule_cycle(now=t1 + timedelta(seconds=PATIENCE))
    mine.refresh_from_db()
    assert result.preempted == [borrowed.pk]
    assert mine.pending_reason == PendingReason.WAITING_FOR_PREEMPTION
    assert mine.reclaim_since == t1  # still waiting: the victim's node confirms the stop first

    # Once the victim's node confirms the stop the job starts, and its clock is cleared.
    t2 = t1 + timedelta(seconds=PATIENCE + 20)
    borrowed.refresh_from_db()
    _report(borrowed, "finished", t2, exit_code=-15, node=borrowed.node.hostname)
    assert dispatch.schedule_cycle(now=t2).placed == [mine.pk]
    mine.refresh_from_db()
    assert mine.status == JobStatus.DISPATCHED and mine.reclaim_since is None


def test_the_job_page_says_since_when_it_waits_for_its_guarantee(client, member, borrowed_fleet):
    t1 = borrowed_fleet["t0"] + timedelta(hours=1)
    _report(borrowed_fleet["own"], "finished", t1, exit_code=0)
    dispatch.schedule_cycle(now=t1)
    mine = borrowed_fleet["mine"]
    client.force_login(member)
    page = client.get(f"/jobs/{mine.pk}/").content.decode()
    assert 'data-testid="reclaim-since">Waiting for its team\'s guarantee since' in page
    assert t1.isoformat() in page
