"""The transactional outbox against a real dead broker and a real refused mail server: a broker
outage delays a kill, launch or notice but never loses it, the API still answers, and a GPU
whose kill is not confirmed stays out of the scheduler's pool."""

import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
import redis
from django.conf import settings
from django.core import mail
from django.db import transaction
from django.utils import timezone

from apps.fleet.choices import NodeStatus
from apps.fleet.models import Node
from apps.jobs import services as jobs
from apps.jobs.choices import JobStatus
from apps.jobs.dispatch import schedule_cycle
from apps.jobs.models import Job, JobAllocation
from apps.outbox.models import OutboxKind, OutboxMessage
from apps.outbox.services import outbox_flush, outbox_send_mail, outbox_send_task
from portal.celery import app
from tests.conftest import client_for

DEAD_BROKER = "redis://127.0.0.1:1/0"  # nothing listens there: connection refused


@pytest.fixture
def broker():
    """Point the portal's Celery app at a dead broker address, and back."""
    live = app.conf.broker_url

    def use(url):
        app.conf.broker_url = url
        app._pool = None
        app.amqp._producer_pool = None

    yield SimpleNamespace(down=lambda: use(DEAD_BROKER), up=lambda: use(live))
    use(live)


@pytest.fixture
def node_queue():
    """Tasks waiting on a node agent's queue in the real Redis, oldest first."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete("node.h100-a", "node.test")

    def read(name):
        return [json.loads(raw)["headers"]["task"] for raw in reversed(client.lrange(name, 0, -1))]

    yield read
    client.delete("node.h100-a", "node.test")


def _finished_report(job, hostname="h100-a"):
    return {"job_id": job.pk, "attempt": 1, "event": "finished", "node": hostname}


@pytest.mark.django_db(transaction=True)
def test_cancel_while_broker_is_down_answers_and_gpus_wait_for_the_kill(
    member, team, h100, quotas, broker, node_queue
):
    Node.objects.exclude(hostname="h100-a").update(status=NodeStatus.DRAINED)
    running = jobs.job_submit(
        actor=member,
        team=team,
        argv=["python", "train.py"],
        gpu_model=h100,
        gpu_count=8,
        max_runtime_seconds=3600,
    )
    assert schedule_cycle().placed == [running.pk]
    assert node_queue("node.h100-a") == ["agent.launch"]  # sent right after the commit
    jobs.job_report(report={"job_id": running.pk, "attempt": 1, "event": "started"})
    waiting = jobs.job_submit(
        actor=member,
        team=team,
        argv=["python", "next.py"],
        gpu_model=h100,
        gpu_count=8,
        max_runtime_seconds=3600,
    )

    broker.down()
    response = client_for(member).post(f"/api/v1/jobs/{running.pk}/cancel/")
    assert response.status_code == 200, response.content
    assert Job.objects.get(pk=running.pk).status == JobStatus.CANCELLED
    kill = OutboxMessage.objects.get(name="agent.kill")
    assert kill.sent_at is None and kill.attempts == 1 and kill.last_error
    # The process may still run: its GPUs are not offered to the waiting job.
    assert schedule_cycle().placed == []
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.QUEUED

    broker.up()
    assert outbox_flush(now=timezone.now() + timedelta(minutes=5))["sent"] == 1
    assert node_queue("node.h100-a") == ["agent.launch", "agent.kill"]
    assert schedule_cycle().placed == []  # sent, not yet confirmed

    jobs.job_report(report=_finished_report(running))  # the agent: process gone
    assert not JobAllocation.objects.filter(job=running, released_at__isnull=True).exists()
    assert schedule_cycle().placed == [waiting.pk]


@pytest.mark.django_db(transaction=True)
def test_messages_wait_out_an_outage_in_order_and_back_off(broker, node_queue):
    broker.down()
    for name in ("agent.launch", "agent.kill", "agent.ping"):
        with transaction.atomic():
            outbox_send_task(name, queue="node.test", args=[1])
    pending = OutboxMessage.objects.filter(sent_at__isnull=True).order_by("id")
    assert pending.count() == 3
    first = pending.first()
    assert first.attempts == 3  # each commit tried, stopping at the oldest
    assert first.next_attempt_at > timezone.now()
    assert outbox_flush() == {"sent": 0, "failed": 0}  # backing off: not even tried

    broker.up()
    assert outbox_flush(now=first.next_attempt_at + timedelta(seconds=1))["sent"] == 3
    assert node_queue("node.test") == ["agent.launch", "agent.kill", "agent.ping"]
    assert outbox_flush()["sent"] == 0  # sent once


@pytest.mark.django_db(transaction=True)
def test_message_of_a_rolled_back_change_is_never_sent(node_queue):
    with pytest.raises(RuntimeError), transaction.atomic():
        outbox_send_task("agent.kill", queue="node.test", args=[1])
        raise RuntimeError("the change failed")
    assert not OutboxMessage.objects.exists()
    assert node_queue("node.test") == []


@pytest.mark.django_db(transaction=True)
def test_notice_survives_a_refused_mail_server(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 2
    with transaction.atomic():
        outbox_send_mail(subject="Booking moved", body="to h100-b", recipients=["a@example.com"])
    notice = OutboxMessage.objects.get(kind=OutboxKind.EMAIL)
    assert notice.sent_at is None and "Connection" in notice.last_error

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert outbox_flush(now=timezone.now() + timedelta(minutes=5))["sent"] == 1
    assert [m.subject for m in mail.outbox] == ["Booking moved"]
    assert mail.outbox[0].to == ["a@example.com"]


@pytest.mark.django_db(transaction=True)
def test_job_cancelled_while_its_launch_waits_in_the_outbox_is_never_launched(
    member, team, h100, quotas, broker, node_queue
):
    Node.objects.exclude(hostname="h100-a").update(status=NodeStatus.DRAINED)

    def submit(argv):
        return jobs.job_submit(
            actor=member, team=team, argv=argv, gpu_model=h100, gpu_count=8,
            max_runtime_seconds=3600,
        )  # fmt: skip

    broker.down()
    job = submit(["python", "train.py"])
    assert schedule_cycle().placed == [job.pk]
    launch = OutboxMessage.objects.get(name="agent.launch")
    assert launch.sent_at is None  # the broker is down: the launch waits
    waiting = submit(["python", "next.py"])

    jobs.job_cancel(job=job, actor=member)
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
    # Withdrawn with the cancel, and no kill for a process that never started.
    assert not OutboxMessage.objects.filter(name__in=("agent.launch", "agent.kill")).exists()
    # Nothing runs on its GPUs: they are free at once, without waiting for a node's word.
    assert not JobAllocation.objects.filter(job=job, released_at__isnull=True).exists()

    broker.up()
    outbox_flush(now=timezone.now() + timedelta(minutes=5))
    assert node_queue("node.h100-a") == []
    assert schedule_cycle().placed == [waiting.pk]
    assert node_queue("node.h100-a") == ["agent.launch"]
    launched = json.loads(
        redis.Redis.from_url(settings.CELERY_BROKER_URL).lindex("node.h100-a", 0)
    )["headers"]["argsrepr"]
    assert str(waiting.pk) in launched and "train.py" not in launched


@pytest.mark.django_db(transaction=True)
def test_cancel_after_the_launch_went_out_still_kills(member, team, h100, quotas, node_queue):
    Node.objects.exclude(hostname="h100-a").update(status=NodeStatus.DRAINED)
    job = jobs.job_submit(
        actor=member, team=team, argv=["python", "train.py"], gpu_model=h100, gpu_count=8,
        max_runtime_seconds=3600,
    )  # fmt: skip
    assert schedule_cycle().placed == [job.pk]
    jobs.job_cancel(job=job, actor=member)
    assert node_queue("node.h100-a") == ["agent.launch", "agent.kill"]
    assert JobAllocation.objects.filter(job=job, released_at__isnull=True).count() == 8


def test_withdraw_needs_a_key(db):
    from apps.outbox.services import outbox_withdraw

    with pytest.raises(ValueError):
        outbox_withdraw(key="")
