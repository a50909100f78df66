"""The live scheduler sees nodes powering up: a job that waits for one says which and about
how long, and powered-down GPUs are never placed on."""

import pytest

from apps.fleet.choices import NodeStatus
from apps.fleet.models import Node
from apps.fleet.services import node_power_observed, node_power_request
from apps.jobs import services
from apps.jobs.dispatch import schedule_cycle
from apps.jobs.models import Job, JobAllocation
from apps.jobs.scheduler.state import PendingReason
from apps.jobs.selectors import PENDING_REASON_LABELS

pytestmark = pytest.mark.django_db


def test_a_job_waiting_for_a_node_powering_up_is_told_and_nothing_lands_on_it(
    member, team, h100, quotas, settings
):
    settings.POWER_RESUME_SECONDS = 240
    Node.objects.filter(hostname="h100-b").update(status=NodeStatus.DRAINED)
    node = Node.objects.get(hostname="h100-a")
    node_power_request(node=node, operation="power_off", actor=None)
    node_power_observed(node=node, operation="suspended", reason="off")
    job = services.job_submit(
        actor=member,
        team=team,
        argv=["python", "train.py"],
        gpu_model=h100,
        gpu_count=4,
        max_runtime_seconds=3600,
    )
    schedule_cycle()
    job.refresh_from_db()
    assert job.pending_reason == PendingReason.NO_CAPACITY
    node_power_request(node=node, operation="power_on", actor=None)
    schedule_cycle()
    job.refresh_from_db()
    assert job.pending_reason == PendingReason.POWERING_UP
    assert job.pending_message == "Node h100-a is powering up (about 4 min)."
    assert not JobAllocation.objects.filter(job=job).exists()
    assert PENDING_REASON_LABELS[PendingReason.POWERING_UP] == "A node is powering up"
    node_power_observed(node=node, operation="resumed", reason="on")
    schedule_cycle()
    assert Job.objects.get(pk=job.pk).status == "dispatched"
