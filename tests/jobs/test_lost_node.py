"""A node declared lost (its agent went quiet: a broker pause, a network split) may still run its
job. The requeued job must not start again on those GPUs until the node has killed the old
attempt. The node's agent here is the real JobRunner running simulated job processes, fed the
messages the outbox holds for its queue."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from apps.fleet.choices import NodeStatus
from apps.fleet.models import Gpu, Node
from apps.jobs import services
from apps.jobs.choices import JobStatus
from apps.jobs.dispatch import schedule_cycle
from apps.jobs.models import Job, JobAllocation
from apps.outbox.models import OutboxMessage
from apps.telemetry.ingest import telemetry_ingest
from apps.telemetry.services import nodes_mark_unreachable
from tests.processes import wait_for
from workers.agent.jobs import JobRunner

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(tmp_path):
    """Node h100-a's job runner; `deliver()` hands it what the outbox holds for its queue, in
    order, and `report()` passes its reports to the portal."""
    reports: list[dict] = []
    runner = JobRunner(hostname="h100-a", report=reports.append, log_dir=tmp_path, simulated=True)

    def deliver() -> list[str]:
        done = []
        pending = OutboxMessage.objects.filter(queue="node.h100-a", sent_at__isnull=True)
        for message in pending.order_by("id"):
            getattr(runner, message.name.removeprefix("agent."))(*message.payload["args"])
            message.sent_at = timezone.now()
            message.save(update_fields=["sent_at"])
            done.append(message.name)
        return done

    def report() -> None:
        while reports:
            services.job_report(report=reports.pop(0))

    runner.deliver, runner.report_all = deliver, report
    yield runner
    runner.stop_all()


def test_requeue_after_node_loss_kills_the_old_attempt_before_its_gpus_are_reused(
    member, team, h100, quotas, agent, drain_listening
):
    Node.objects.exclude(hostname="h100-a").update(status=NodeStatus.DRAINED)
    job = services.job_submit(
        actor=member,
        team=team,
        argv=["python", "train.py"],
        gpu_model=h100,
        gpu_count=8,
        max_runtime_seconds=3600,
        env={"SIMULATED_DURATION": "600"},
    )
    assert schedule_cycle().placed == [job.pk]
    assert agent.deliver() == ["agent.launch"]
    agent.report_all()
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    first = agent.running[(job.pk, 1)].process
    gpus = set(Gpu.objects.filter(node__hostname="h100-a").values_list("pk", flat=True))

    # The agent goes quiet long enough to be declared lost; its process runs on.
    Node.objects.filter(hostname="h100-a").update(last_seen=timezone.now() - timedelta(minutes=5))
    assert nodes_mark_unreachable() == ["h100-a"]
    job.refresh_from_db()
    assert job.status == JobStatus.REQUEUED and job.attempt == 2
    # The kill for attempt 1 waits for the node, with the lost attempt and grace period.
    kill = OutboxMessage.objects.get(name="agent.kill", queue="node.h100-a")
    assert kill.payload["args"] == [job.pk, 1, settings.JOBS_KILL_GRACE_SECONDS]

    # The node reports again: up, but attempt 1 may still hold its GPUs.
    now = timezone.now()
    uuid = Gpu.objects.filter(node__hostname="h100-a").first().uuid
    telemetry_ingest(
        batch={
            "node": "h100-a",
            "seq": 1,
            "sent_at": now.timestamp(),
            "samples": [{"uuid": uuid, "ts": now.timestamp(), "util_gpu": 95}],
        }
    )
    assert Node.objects.get(hostname="h100-a").status == NodeStatus.UP
    assert first.poll() is None  # still running
    assert schedule_cycle().placed == []
    assert Job.objects.get(pk=job.pk).status == JobStatus.REQUEUED

    # The node takes its messages: the kill (and the one sent again on its return) first.
    assert set(agent.deliver()) == {"agent.kill"}
    assert wait_for(lambda: first.poll() is not None)
    assert wait_for(lambda: not agent.running)
    assert schedule_cycle().placed == []  # killed, not yet confirmed
    agent.report_all()  # "finished": the portal frees the GPUs
    assert not JobAllocation.objects.filter(attempt=1, released_at__isnull=True).exists()

    assert schedule_cycle().placed == [job.pk]
    second = set(JobAllocation.objects.filter(job=job, attempt=2).values_list("gpu_id", flat=True))
    assert second == gpus
    assert agent.deliver() == ["agent.launch"]
    assert set(agent.running) == {(job.pk, 2)}  # one attempt runs, never two


def test_node_back_sends_the_kill_again(member, team, h100, quotas, drain_listening):
    """A kill lost with the broker's queue (Redis restarted while the node was away) is sent
    again when the node reports."""
    Node.objects.exclude(hostname="h100-a").update(status=NodeStatus.DRAINED)
    job = services.job_submit(
        actor=member,
        team=team,
        argv=["python", "train.py"],
        gpu_model=h100,
        gpu_count=2,
        max_runtime_seconds=3600,
    )
    schedule_cycle()
    Node.objects.filter(hostname="h100-a").update(last_seen=timezone.now() - timedelta(minutes=5))
    nodes_mark_unreachable()
    OutboxMessage.objects.update(sent_at=timezone.now())  # sent, then lost with the queue
    node = Node.objects.get(hostname="h100-a")
    telemetry_ingest(batch={"node": "h100-a", "seq": 1, "samples": [
        {"uuid": Gpu.objects.filter(node=node).first().uuid, "ts": timezone.now().timestamp()}
    ]})  # fmt: skip
    resent = OutboxMessage.objects.filter(name="agent.kill", sent_at__isnull=True)
    assert [m.payload["args"][:2] for m in resent] == [[job.pk, 1]]
