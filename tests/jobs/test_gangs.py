"""Multi-node gang jobs live: rendezvous per node, the whole gang stopped and requeued once;
preemptions counted with the GPU-time they lose."""

import pytest
from django.utils import timezone

from apps.fleet.models import Gpu, Node
from apps.jobs import services
from apps.jobs.choices import JobStatus
from apps.jobs.dispatch import build_state, schedule_cycle
from apps.jobs.models import Job, JobAllocation

pytestmark = pytest.mark.django_db


def _gang(member, team, h100, sent) -> tuple[Job, list]:
    """A 12-GPU job on two 8-GPU nodes, dispatched and started."""
    job = services.job_submit(
        actor=member, team=team, argv=["torchrun", "train.py"], gpu_count=12,
        max_runtime_seconds=3600, gpu_model=h100,
    )  # fmt: skip
    assert job.same_node is False  # larger than any node: a multi-node gang, not a refusal
    assert schedule_cycle().placed == [job.pk]
    launches = [args[0] for name, _, args in sent if name == "agent.launch"]
    services.job_report(report={"job_id": job.pk, "attempt": 1, "event": "started", "rank": 0})
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    return job, launches


def _kills(sent) -> list[tuple[str, int]]:
    return sorted((host, args[1]) for name, host, args in sent if name == "agent.kill")


def test_each_node_of_a_gang_gets_rank_world_size_and_rendezvous(member, team, h100, quotas, sent):
    job, launches = _gang(member, team, h100, sent)
    hosts = {name_host[1] for name_host in sent if name_host[0] == "agent.launch"}
    assert hosts == {"h100-a", "h100-b"}
    by_rank = {spec["rank"]: spec for spec in launches}
    assert sorted(by_rank) == [0, 1]
    assert {spec["world_size"] for spec in launches} == {2}
    # rank 0 is the node holding most of the gang; everyone meets there on one port
    assert len(by_rank[0]["gpu_uuids"]) == 8 and len(by_rank[1]["gpu_uuids"]) == 4
    assert {spec["master_addr"] for spec in launches} == {job.node.hostname}
    assert len({spec["master_port"] for spec in launches}) == 1
    uuids = set(Gpu.objects.filter(job_allocations__job=job).values_list("uuid", flat=True))
    assert set(by_rank[0]["gpu_uuids"]) | set(by_rank[1]["gpu_uuids"]) == uuids
    assert len(uuids) == 12


def test_a_rank_that_fails_stops_the_whole_gang_which_is_requeued_once(
    member, team, h100, quotas, sent
):
    job, launches = _gang(member, team, h100, sent)
    secondary = next(s for s in launches if s["rank"] == 1)
    host = next(h for n, h, a in sent if n == "agent.launch" and a[0]["rank"] == 1)
    sent.clear()
    # the second node could not start its part (exit code 127)
    report = {"job_id": job.pk, "attempt": 1, "event": "finished", "rank": 1,
              "exit_code": 127, "node": host}  # fmt: skip
    assert services.job_report(report=report) == JobStatus.REQUEUED
    job.refresh_from_db()
    assert job.status == JobStatus.REQUEUED and job.gang_requeued and job.attempt == 2
    assert _kills(sent) == [("h100-a", 1), ("h100-b", 1)]  # every node of attempt 1
    assert not JobAllocation.objects.filter(job=job, end__isnull=True).exists()
    assert secondary["job_id"] == job.pk
    # the first node confirms its half stopped: the GPUs are free again
    primary = next(h for n, h, a in sent if n == "agent.kill" and h != host)
    stopped = dict(report, rank=0, node=primary, exit_code=-15)
    assert services.job_report(report=stopped) == "ignored"  # an old attempt
    # a normal finish of a secondary rank is no failure
    assert schedule_cycle().placed == [job.pk]
    services.job_report(report={"job_id": job.pk, "attempt": 2, "event": "started", "rank": 0})
    ok = dict(report, attempt=2, exit_code=0)
    assert services.job_report(report=ok) == "ignored"
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    # a second break fails it
    assert services.job_report(report=dict(report, attempt=2, exit_code=None)) == "failed"
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "second time" in job.pending_message
    assert not JobAllocation.objects.filter(job=job, end__isnull=True).exists()


def test_a_lost_node_stops_the_whole_gang_and_requeues_it_once(member, team, h100, quotas, sent):
    job, _ = _gang(member, team, h100, sent)
    sent.clear()
    lost = Node.objects.get(hostname="h100-b")
    assert services.jobs_requeue_for_node(node=lost) == [job.pk]
    job.refresh_from_db()
    assert job.status == JobStatus.REQUEUED and job.gang_requeued
    assert ("h100-a", 1) in _kills(sent)  # the surviving node stops its half


def test_preemption_counts_and_gpu_seconds_lost(member, team, h100, quotas, sent):
    plain = services.job_submit(actor=member, team=team, argv=["x"], gpu_count=2,
                                max_runtime_seconds=3600, gpu_model=h100)  # fmt: skip
    saved = services.job_submit(actor=member, team=team, argv=["x"], gpu_count=2,
                                max_runtime_seconds=3600, gpu_model=h100,
                                checkpointable=True)  # fmt: skip
    schedule_cycle()
    started = timezone.now() - timezone.timedelta(seconds=1000)
    Job.objects.filter(pk__in=[plain.pk, saved.pk]).update(
        status=JobStatus.RUNNING, started_at=started
    )
    for job in (plain, saved):
        services.job_preempt(job=job)
        job.refresh_from_db()
        assert job.status == JobStatus.PREEMPTED and job.preemption_count == 1
    assert plain.gpu_seconds_lost == pytest.approx(2 * 1000, abs=20)
    assert saved.gpu_seconds_lost == 0.0
    # the scheduler sees both: requeued, they carry their preemption count and checkpointing
    for job in (plain, saved):
        services.job_report(
            report={"job_id": job.pk, "attempt": 1, "event": "finished", "exit_code": -15}
        )
    state = build_state(now=timezone.now())
    queued = {q.job_id: q for q in state.queued}
    assert queued[plain.pk].preemptions == 1 and not queued[plain.pk].checkpointable
    assert queued[saved.pk].preemptions == 1 and queued[saved.pk].checkpointable


def test_api_takes_checkpointable_and_shows_preemptions_and_loss(member, fleet, quotas, sent):
    from tests.conftest import client_for

    client = client_for(member)
    data = {"team": "vision", "argv": ["python", "train.py"], "gpu_model": "H100-SXM-80GB",
            "gpu_count": 12, "max_runtime_seconds": 3600, "checkpointable": True}  # fmt: skip
    response = client.post("/api/v1/jobs/", data, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.checkpointable and not job.same_node  # 12 GPUs: a two-node gang
    schedule_cycle()
    services.job_preempt(job=job)
    detail = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert detail["checkpointable"] is True and detail["same_node"] is False
    assert detail["preemption_count"] == 1 and detail["gpu_seconds_lost"] == 0.0


def test_a_gang_goes_to_nodes_of_one_rack_from_the_node_labels(member, team, h100, quotas, sent):
    from tests.factories import make_node_with_gpus

    # h100-a and h100-b (the fleet fixture) are unlabelled / rack r1; h100-c joins b in r2.
    Node.objects.filter(hostname="h100-b").update(labels={"rack": "r2", "row": "3"})
    make_node_with_gpus("h100-c", 8)
    Node.objects.filter(hostname="h100-c").update(labels={"rack": "r2"})
    Node.objects.filter(hostname="h100-a").update(labels={"rack": "r1"})
    Node.objects.filter(hostname="l40s-a").update(labels=["rack", "r2"])  # not a mapping
    racks = {g.node: g.rack for g in build_state(now=timezone.now()).gpus}
    assert racks == {"h100-a": "r1", "h100-b": "r2", "h100-c": "r2", "l40s-a": None}
    job = services.job_submit(
        actor=member, team=team, argv=["torchrun", "train.py"], gpu_count=12,
        max_runtime_seconds=3600, gpu_model=h100,
    )  # fmt: skip
    assert schedule_cycle().placed == [job.pk]
    hosts = {name_host[1] for name_host in sent if name_host[0] == "agent.launch"}
    assert hosts == {"h100-b", "h100-c"}  # without racks: h100-a + h100-b (names first)
