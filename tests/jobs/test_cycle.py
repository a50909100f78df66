"""The scheduling cycle applies a Decision: placements, multi-node launches, pending reasons,
preemptions; stale placements are skipped; the fair-share usage decays."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import Gpu
from apps.jobs import dispatch, services
from apps.jobs.choices import JobStatus
from apps.jobs.models import Job, JobAllocation
from apps.jobs.scheduler.state import Decision, Pending, PendingReason, Placement, Preemption
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def _submit(member, team, **kwargs):
    data = {"argv": ["true"], "gpu_count": 2, "max_runtime_seconds": 3600, **kwargs}
    return services.job_submit(actor=member, team=team, **data)


def _gpu_ids(host, n):
    return tuple(
        Gpu.objects.filter(node__hostname=host).order_by("index").values_list("id", flat=True)[:n]
    )


def test_state_lists_schedulable_gpus_queue_running_bookings_quotas(
    member, team, h100, quotas, sent
):
    running = _submit(member, team, gpu_model=h100)
    dispatch.schedule_cycle()
    queued = _submit(member, team, gpu_model=h100, gpu_count=8)
    state = dispatch.build_state(now=timezone.now())
    assert len(state.gpus) == 20
    assert [q.job_id for q in state.queued] == [queued.pk]
    assert state.queued[0].gpu_model == "H100-SXM-80GB" and state.queued[0].gpu_count == 8
    assert [r.job_id for r in state.running] == [running.pk]
    assert len(state.running[0].gpu_ids) == 2
    assert {(q.team, q.guaranteed, q.limit) for q in state.quotas} == {
        ("vision", 4, 12),
        ("nlp", 8, 16),
    }
    assert state.usage.get("vision", 0) >= 0


def test_multi_node_placement_launches_every_node_with_ranks(
    member, team, h100, sent, monkeypatch, django_capture_on_commit_callbacks
):
    job = _submit(member, team, gpu_model=h100, gpu_count=4, same_node=False)
    gpus = _gpu_ids("h100-a", 3) + _gpu_ids("h100-b", 1)
    monkeypatch.setattr(
        dispatch,
        "run_scheduler",
        lambda state: Decision(placements=[Placement(job.pk, gpus, True)]),
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert dispatch.schedule_cycle().placed == [job.pk]
    launches = {host: args[0] for name, host, args in sent if name == "agent.launch"}
    assert set(launches) == {"h100-a", "h100-b"}
    assert launches["h100-a"]["rank"] == 0 and len(launches["h100-a"]["gpu_uuids"]) == 3
    assert launches["h100-b"]["rank"] == 1 and launches["h100-b"]["ranks"] == 2
    job.refresh_from_db()
    assert job.node.hostname == "h100-a"
    assert JobAllocation.objects.filter(job=job, over_quota=True).count() == 4
    # Rank 1's report does not move the job; rank 0's finish stops rank 1 too.
    services.job_report(report={"job_id": job.pk, "attempt": 1, "rank": 1, "event": "started"})
    job.refresh_from_db()
    assert job.status == JobStatus.DISPATCHED
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.job_report(
            report={"job_id": job.pk, "attempt": 1, "rank": 0, "event": "finished", "exit_code": 0}
        )
    assert [(n, h) for n, h, _ in sent if n == "agent.kill"] == [("agent.kill", "h100-b")]


def test_pending_reason_and_estimate_are_written(member, team, h100, sent, monkeypatch):
    job = _submit(member, team, gpu_model=h100)
    when = timezone.now() + timedelta(hours=2)
    monkeypatch.setattr(
        dispatch,
        "run_scheduler",
        lambda state: Decision(
            pending=[
                Pending(job.pk, PendingReason.FAIR_SHARE, "Other teams first.", when.timestamp())
            ]
        ),
    )
    dispatch.schedule_cycle()
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert job.pending_reason == "fair_share" and job.pending_message == "Other teams first."
    assert abs((job.estimated_start - when).total_seconds()) < 1


def test_stale_placement_on_busy_gpu_is_skipped(member, team, h100, sent, monkeypatch):
    first = _submit(member, team, gpu_model=h100)
    second = _submit(member, team, gpu_model=h100)
    gpus = _gpu_ids("h100-a", 2)
    monkeypatch.setattr(
        dispatch,
        "run_scheduler",
        lambda state: Decision(
            placements=[Placement(first.pk, gpus, False), Placement(second.pk, gpus, False)]
        ),
    )
    assert dispatch.schedule_cycle().placed == [first.pk]
    assert Job.objects.get(pk=second.pk).status == JobStatus.QUEUED
    assert JobAllocation.objects.filter(end__isnull=True).count() == 2


def test_a_gpu_released_after_the_cycle_read_its_clock_is_allocated_from_its_release(
    member, team, h100, sent, monkeypatch
):
    """A cancel that commits while a cycle runs releases its GPUs at the cancel's time, later
    than the clock the cycle read when it began: the next allocation of those GPUs starts at
    the release, so no GPU is ever in two overlapping allocations."""
    cycle_clock = timezone.now()
    released = cycle_clock + timedelta(milliseconds=40)
    gpus = _gpu_ids("h100-a", 2)
    cancelled = _submit(member, team, gpu_model=h100)
    for gpu_id in gpus:
        JobAllocation.objects.create(
            job=cancelled, gpu_id=gpu_id, start=cycle_clock - timedelta(seconds=10),
            end=released, released_at=released,
        )  # fmt: skip
    Job.objects.filter(pk=cancelled.pk).update(status=JobStatus.CANCELLED, finished_at=released)
    waiting = _submit(member, team, gpu_model=h100)
    monkeypatch.setattr(
        dispatch,
        "run_scheduler",
        lambda state: Decision(placements=[Placement(waiting.pk, gpus, False)]),
    )

    assert dispatch.schedule_cycle(now=cycle_clock).placed == [waiting.pk]

    starts = set(JobAllocation.objects.filter(job=waiting).values_list("start", flat=True))
    assert starts == {released}
    assert Job.objects.get(pk=waiting.pk).dispatched_at == released


def test_preemption_kills_and_requeues_after_stop(
    member,
    team,
    outsider,
    other_team,
    h100,
    quotas,
    sent,
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    victim = _submit(member, team, gpu_model=h100, gpu_count=8, priority_class="preemptible")
    dispatch.schedule_cycle()
    victim.refresh_from_db()
    waiting = services.job_submit(
        actor=outsider,
        team=other_team,
        argv=["true"],
        gpu_model=h100,
        gpu_count=8,
        max_runtime_seconds=60,
        priority_class="guaranteed",
    )
    monkeypatch.setattr(
        dispatch,
        "run_scheduler",
        lambda state: Decision(
            preemptions=[Preemption(victim.pk, waiting.pk)],
            pending=[Pending(waiting.pk, PendingReason.WAITING_FOR_PREEMPTION, "Stopping others.")],
        ),
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert dispatch.schedule_cycle().preempted == [victim.pk]
    victim.refresh_from_db()
    assert victim.status == JobStatus.PREEMPTED
    kills = [(h, args) for name, h, args in sent if name == "agent.kill"]
    assert kills == [(victim.node.hostname, (victim.pk, 1, 30))]
    # Its GPUs stay held until the agent confirms the stop.
    assert JobAllocation.objects.filter(job=victim, end__isnull=True).count() == 8
    services.job_report(
        report={"job_id": victim.pk, "attempt": 1, "event": "finished", "exit_code": -15}
    )
    victim.refresh_from_db()
    assert victim.status == JobStatus.REQUEUED and victim.attempt == 2
    assert not JobAllocation.objects.filter(job=victim, end__isnull=True).exists()


def test_usage_decays_with_half_life(member, team, h100):
    now = timezone.now()
    job = Job.objects.create(
        team=team, submitted_by=member, argv=["x"], gpu_count=1, max_runtime_seconds=60
    )
    gpu = Gpu.objects.filter(model=h100).first()
    hour = timedelta(hours=1)
    JobAllocation.objects.create(job=job, gpu=gpu, start=now - 2 * hour, end=now - hour)
    fresh = dispatch.usage_by_team(now=now - hour, half_life=3600)["vision"]
    aged = dispatch.usage_by_team(now=now, half_life=3600)["vision"]
    assert 3600 * 0.70 < fresh < 3600 * 0.73  # (1 - 1/2) / ln 2 hours of weight
    assert abs(aged - fresh / 2) < 1  # one half-life later: half


def test_state_leaves_out_drained_and_in_maintenance_nodes(team, fleet, platform_admin):
    from apps.fleet.choices import NodeStatus
    from apps.fleet.models import MaintenanceWindow, Node

    now = timezone.now()
    Node.objects.filter(hostname="h100-a").update(status=NodeStatus.DRAINED)
    MaintenanceWindow.objects.create(
        node=Node.objects.get(hostname="l40s-a"),
        start=now - timedelta(minutes=5),
        end=now + timedelta(hours=1),
        reason="firmware",
    )
    state = dispatch.build_state(now=now)
    assert {g.node for g in state.gpus} == {"h100-b"}


def test_a_job_waiting_for_a_preemption_starts_the_cycle_after_the_node_confirms_the_stop(
    member, team, outsider, other_team, h100, quotas, sent, django_capture_on_commit_callbacks
):
    # vision (4 guaranteed) runs 4 GPUs within its guarantee and 8 over it, an hour old.
    within = _submit(member, team, gpu_model=h100, gpu_count=4)
    over = _submit(member, team, gpu_model=h100, gpu_count=8)
    assert sorted(dispatch.schedule_cycle().placed) == [within.pk, over.pk]
    hour_ago = timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk__in=[within.pk, over.pk]).update(
        status=JobStatus.RUNNING, started_at=hour_ago
    )
    over_gpus = set(JobAllocation.objects.filter(job=over).values_list("gpu_id", flat=True))
    over_node = Job.objects.get(pk=over.pk).node.hostname
    assert JobAllocation.objects.filter(job=over, over_quota=True).count() == 8
    # nlp asks for 8 GPUs on one node, within its guarantee: only stopping `over` makes room.
    waiting = _submit(outsider, other_team, gpu_model=h100, gpu_count=8,
                      max_runtime_seconds=36000)  # fmt: skip
    result = dispatch.schedule_cycle()
    assert result.preempted == [over.pk] and result.placed == []
    waiting.refresh_from_db()
    assert waiting.status == JobStatus.QUEUED
    assert waiting.pending_reason == PendingReason.WAITING_FOR_PREEMPTION
    # Until the node confirms the stop the GPUs are not offered to anyone, so a cycle now
    # places nothing on them (the victim may still hold their memory for the grace period).
    assert dispatch.schedule_cycle().placed == []
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.job_report(report={"job_id": over.pk, "attempt": 1, "event": "finished",
                                    "exit_code": -15, "node": over_node})  # fmt: skip
    assert ("jobs.schedule", "portal", ()) in sent  # the confirmation asks for a cycle at once
    assert dispatch.schedule_cycle().placed == [waiting.pk]
    assert set(JobAllocation.objects.filter(job=waiting).values_list("gpu_id", flat=True)) == (
        over_gpus
    )


def test_state_gives_a_requeued_job_the_gpu_seconds_it_ran_and_the_spare_order_setting(
    member, team, h100, quotas, sent, settings, monkeypatch
):
    job = _submit(member, team, gpu_model=h100, gpu_count=2)
    other = _submit(member, team, gpu_model=h100, gpu_count=1)
    assert sorted(dispatch.schedule_cycle().placed) == [job.pk, other.pk]
    # The first attempt ran 1,000 s on 2 GPUs, then its node was lost: requeued.
    start = timezone.now() - timedelta(seconds=1000)
    JobAllocation.objects.filter(job=job).update(start=start, end=start + timedelta(seconds=1000))
    Job.objects.filter(pk=job.pk).update(status=JobStatus.REQUEUED)
    Job.objects.filter(pk=other.pk).update(status=JobStatus.RUNNING)
    queued = {q.job_id: q for q in dispatch.build_state(now=timezone.now()).queued}
    assert set(queued) == {job.pk}  # the running job is not queued and counts for nothing
    assert queued[job.pk].attained == pytest.approx(2000.0)
    seen = {}
    settings.JOBS_SPARE_ORDER = "las"
    settings.JOBS_RECLAIM_PATIENCE_SECONDS = 120
    monkeypatch.setattr(
        "apps.jobs.scheduler.schedule",
        lambda state, policy, config: (
            seen.update(order=config.spare_order, patience=config.reclaim_patience_seconds)
            or Decision()
        ),
    )
    dispatch.schedule_cycle()
    assert seen == {"order": "las", "patience": 120.0}


def test_the_job_page_says_which_jobs_stop_to_give_the_guarantee_back(
    client, member, team, outsider, other_team, quotas, sent
):
    # nlp (8 guaranteed of 16 H100) fills the fleet: its second 8-GPU job borrows vision's.
    for _ in range(2):
        services.job_submit(actor=outsider, team=other_team, argv=["true"],
                            gpu_model=quotas[0].gpu_model, gpu_count=8,
                            max_runtime_seconds=36_000)  # fmt: skip
    assert len(dispatch.schedule_cycle().placed) == 2
    mine = _submit(member, team, gpu_model=quotas[0].gpu_model, gpu_count=4)
    dispatch.schedule_cycle()
    mine.refresh_from_db()
    assert mine.status == JobStatus.QUEUED and mine.pending_reason == "reclaiming_guarantee"
    client.force_login(member)
    page = client.get(f"/jobs/{mine.pk}/").content.decode()
    assert "Reclaiming your guarantee: 1 job of team nlp stops in 30 min." in page
    assert 'data-testid="estimated-start">Estimated start' in page


def test_state_gives_a_teammates_job_its_turn_ahead_of_a_users_backlog(
    member, team, h100, quotas, sent
):
    """vision is guaranteed 4 GPUs: each 4-GPU hour alice asks for moves her clock an hour,
    so her fifth job's turn is 4 h after she submitted it; bob's job, submitted after all of
    hers, takes its turn at once (per-user fair share inside a team)."""
    bob = MembershipFactory(team=team, user=UserFactory(username="bob")).user
    backlog = [_submit(member, team, gpu_model=h100, gpu_count=4) for _ in range(5)]
    teammate = _submit(bob, team, gpu_model=h100, gpu_count=1)
    queued = {q.job_id: q for q in dispatch.build_state(now=timezone.now()).queued}
    first = backlog[0].submitted_at.timestamp()
    assert queued[backlog[0].pk].turn == pytest.approx(first)
    assert queued[backlog[4].pk].turn == pytest.approx(first + 4 * 3600, abs=5)
    assert queued[teammate.pk].turn == pytest.approx(teammate.submitted_at.timestamp())
    order = sorted(queued.values(), key=lambda q: q.queued_since)
    assert [q.job_id for q in order][:2] == [backlog[0].pk, teammate.pk]


def test_state_carries_the_units_quota_rows_and_the_tree(platform_admin, h100):
    from apps.teams.quota_rule import UnitQuotaRow
    from tests.teams.departments import build_departments

    org = build_departments(platform_admin, h100)
    units = org["units"]
    state = dispatch.build_state(now=timezone.now())
    assert set(state.unit_quotas) == {
        UnitQuotaRow("research", h100.name, 6, 10),
        UnitQuotaRow("lab", h100.name, 3, 6),
    }
    assert state.org_tree.team_path("cv") == [units["root"].slug, "research", "lab"]
    assert state.org_tree.teams_under("research") == {"nlp", "cv"}
