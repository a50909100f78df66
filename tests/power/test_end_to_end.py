"""Power saving end to end: simulated node agents (separate processes) -> Redis -> the portal's
Celery worker running the policy task and the drivers' requests -> PostgreSQL. An idle node
powers down (its agent stops reporting), a submitted job that needs it wakes it and runs; a
node whose hardware never comes back becomes resume_failed and its booking moves."""

import os
import subprocess
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

import pytest
import requests
from django.utils import timezone

from apps.fleet.choices import PowerState
from apps.fleet.models import Gpu, GpuModel, Node
from apps.jobs import services as job_services
from apps.jobs.choices import JobStatus
from apps.jobs.dispatch import schedule_cycle
from apps.jobs.models import Job
from apps.outbox.models import OutboxMessage
from apps.power.tasks import policy_cycle
from apps.reservations.models import ReservationGpu
from apps.teams.models import Quota
from apps.telemetry.drain import telemetry_drain
from apps.telemetry.models import GpuSample
from apps.telemetry.tasks import poll_fleet
from tests.factories import PlatformAdminFactory, make_booking
from tests.processes import redfish_emulator, spawn_agent, stop, wait_for


def _power(hostname: str) -> str:
    return Node.objects.get(hostname=hostname).power_state


@pytest.fixture
def powered_fleet(tmp_path, settings):
    """Two simulated 4-GPU nodes with power saving on: no idle time needed, one node (4 GPUs)
    kept warm, the policy task sent to the real worker on every poll of the test."""
    from celery.contrib.testing.worker import start_worker

    from portal.celery import app

    folder = tmp_path / "power"
    settings.TELEMETRY_POLL_SECONDS = 1
    settings.POWER_SAVE_ENABLED = True
    settings.POWER_SAVE_IDLE_MINUTES = 0
    settings.POWER_SAVE_WARM_GPUS = "4"
    settings.POWER_MIN_ON_MINUTES = 1
    settings.POWER_MIN_OFF_MINUTES = 0
    settings.POWER_RESUME_SECONDS = 1
    settings.POWER_BOOKING_MARGIN_SECONDS = 1
    settings.POWER_RESUME_TIMEOUT_SECONDS = 4
    settings.POWER_SIMULATED_DIR = str(folder)
    app.control.purge()
    agents: dict[str, subprocess.Popen] = {}

    def start(name: str) -> str:
        hostname = f"power-e2e-{os.getpid()}-{name}"
        agents[hostname] = spawn_agent(hostname, power_dir=folder, job_dir=tmp_path / "jobs")
        assert wait_for(lambda: Gpu.objects.filter(node__hostname=hostname).count() == 4)
        return hostname

    def cycle() -> None:
        """What beat and the telemetry loop do, at the test's pace: poll the agents, drain
        their batches, run the policy (on the worker) and a scheduling cycle."""
        poll_fleet()
        telemetry_drain()
        policy_cycle.delay()
        schedule_cycle()

    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        try:
            yield start, cycle, agents
        finally:
            for process in agents.values():
                stop(process)


def _on_for_a_while() -> None:
    """The nodes came on before the minimum on time (they just registered)."""
    Node.objects.update(power_state_since=timezone.now() - timedelta(hours=1))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_idle_node_powers_down_and_a_submitted_job_wakes_it(powered_fleet, team, member):
    start, cycle, agents = powered_fleet
    first, second = start("a"), start("b")
    _on_for_a_while()
    # One node powers down (the other is the warm reserve); its agent stops reporting.
    assert wait_for(
        lambda: sorted(Node.objects.values_list("power_state", flat=True)) == ["off", "on"],
        poll=cycle,
    )
    off = Node.objects.get(power_state=PowerState.OFF).hostname
    assert Node.objects.get(hostname=off).power_state_by == "power driver"
    silent_since = timezone.now()
    cycle()
    cycle()
    assert not GpuSample.objects.filter(
        gpu__node__hostname=off, ts__gt=silent_since + timedelta(seconds=2)
    ).exists()
    assert Node.objects.get(hostname=off).status == "up"  # silent by design, not lost

    # A job larger than the warm node wakes the powered-down one and runs across both.
    h100 = GpuModel.objects.get(name="H100-SXM-80GB")
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=8, limit=8)
    job = job_services.job_submit(
        actor=member,
        team=team,
        argv=["python", "train.py"],
        gpu_model=h100,
        gpu_count=8,
        same_node=False,
        max_runtime_seconds=600,
        env={"SIMULATED_DURATION": "2"},
    )
    assert wait_for(lambda: _power(off) != PowerState.OFF, poll=cycle)
    assert wait_for(lambda: _power(off) == PowerState.ON, poll=cycle, timeout=60)
    assert wait_for(
        lambda: Job.objects.get(pk=job.pk).status in (JobStatus.RUNNING, JobStatus.SUCCEEDED),
        poll=cycle,
        timeout=60,
    )
    assert wait_for(
        lambda: GpuSample.objects.filter(gpu__node__hostname=off, ts__gt=silent_since).exists(),
        poll=cycle,
    )
    assert {first, second} == set(agents)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_node_that_never_comes_back_fails_and_its_booking_moves(powered_fleet, team, member):
    start, cycle, agents = powered_fleet
    admin = PlatformAdminFactory(username="ops", email="ops@example.com")
    start("a"), start("b")
    _on_for_a_while()
    assert wait_for(lambda: Node.objects.filter(power_state=PowerState.OFF).exists(), poll=cycle)
    dead = Node.objects.get(power_state=PowerState.OFF).hostname
    stop(agents.pop(dead))  # the hardware will not power on again
    start_at = (timezone.now() + timedelta(minutes=2)).replace(second=0, microsecond=0)
    booking = make_booking(
        team,
        member,
        list(Gpu.objects.filter(node__hostname=dead).order_by("index")[:2]),
        start_at,
        start_at + timedelta(hours=1),
    )
    # The booking is within reach once the lead time is two minutes.
    Node.objects.filter(hostname=dead).update(labels={"power_resume_seconds": "120"})
    assert wait_for(lambda: _power(dead) == PowerState.RESUME_FAILED, poll=cycle, timeout=60)
    holdings = ReservationGpu.objects.filter(reservation=booking, active=True)
    assert {h.gpu.node.hostname for h in holdings} == set(agents)
    assert {h.change_reason for h in holdings} == {f"node {dead} did not power back on"}
    mail = OutboxMessage.objects.get(name__contains=f"{dead} did not power on")
    assert mail.payload["recipients"] == [admin.email]


# --- the same, through a real Redfish BMC -----------------------------------------------------

BMC_USER, BMC_PASSWORD = "portal", "bmc-secret-1"


class Bmc(NamedTuple):
    hostname: str
    url: str
    system: str
    log: Path
    stop: object  # stops the emulator process


def _bmc_power_state(url: str, system: str) -> str:
    """What the BMC itself says, read over Redfish without the portal's driver."""
    answer = requests.get(
        f"{url}/redfish/v1/Systems/{system}", auth=(BMC_USER, BMC_PASSWORD), timeout=5
    )
    answer.raise_for_status()
    return answer.json()["PowerState"]


@pytest.fixture
def redfish_fleet(powered_fleet, settings, tmp_path):
    """The powered fleet with each node behind a BMC of its own (a sushy-emulator process
    whose fake system starts On), powered by the Redfish driver. The emulator applies a power
    change 1-11 s after it is asked, so the timeouts leave room for that on a busy host.
    Yields start(name) -> Bmc, the poll cycle and the agents."""
    start, cycle, agents = powered_fleet
    settings.POWER_REDFISH_USERNAME = BMC_USER
    settings.POWER_REDFISH_PASSWORD = BMC_PASSWORD
    settings.POWER_REDFISH_TIMEOUT_SECONDS = 3
    settings.POWER_RESUME_TIMEOUT_SECONDS = 40
    bmcs: list[ExitStack] = []

    def start_redfish(name: str) -> Bmc:
        hostname = start(name)
        system = f"system-{name}"
        bmc = ExitStack()
        bmcs.append(bmc)
        url = bmc.enter_context(
            redfish_emulator(
                tmp_path / f"bmc-{name}",
                [{"uuid": system, "name": hostname, "power_state": "On"}],
                users={BMC_USER: BMC_PASSWORD},
            )
        )
        Node.objects.filter(hostname=hostname).update(
            labels={"power_driver": "redfish", "redfish_url": url, "redfish_system": system}
        )
        return Bmc(hostname, url, system, tmp_path / f"bmc-{name}" / "emulator.log", bmc.close)

    try:
        yield start_redfish, cycle, agents
    finally:
        for bmc in bmcs:
            bmc.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_bmc_powers_an_idle_node_down_and_on_again_for_a_submitted_job(
    redfish_fleet, team, member
):
    start, cycle, _agents = redfish_fleet
    nodes = {bmc.hostname: bmc for bmc in (start("a"), start("b"))}
    _on_for_a_while()
    # The policy (on the worker) asks one BMC for a graceful shutdown; the node is off once
    # the BMC reads Off (the other node is the warm reserve).
    assert wait_for(
        lambda: sorted(Node.objects.values_list("power_state", flat=True)) == ["off", "on"],
        poll=cycle,
        timeout=90,
    )
    off = Node.objects.get(power_state=PowerState.OFF).hostname
    on = next(hostname for hostname in nodes if hostname != off)
    assert _bmc_power_state(nodes[off].url, nodes[off].system) == "Off"
    assert _bmc_power_state(nodes[on].url, nodes[on].system) == "On"
    assert "ComputerSystem.Reset" in nodes[off].log.read_text()
    assert "ComputerSystem.Reset" not in nodes[on].log.read_text()

    h100 = GpuModel.objects.get(name="H100-SXM-80GB")
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=8, limit=8)
    job = job_services.job_submit(
        actor=member,
        team=team,
        argv=["python", "train.py"],
        gpu_model=h100,
        gpu_count=8,
        same_node=False,
        max_runtime_seconds=600,
        env={"SIMULATED_DURATION": "2"},
    )
    assert wait_for(lambda: _power(off) == PowerState.ON, poll=cycle, timeout=90)
    assert _bmc_power_state(nodes[off].url, nodes[off].system) == "On"
    assert Node.objects.get(hostname=off).power_state_by == "power driver"
    assert wait_for(
        lambda: Job.objects.get(pk=job.pk).status in (JobStatus.RUNNING, JobStatus.SUCCEEDED),
        poll=cycle,
        timeout=60,
    )
    placed = Job.objects.get(pk=job.pk).allocations.values_list("gpu__node__hostname", flat=True)
    assert set(placed) == {off, on}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_node_whose_bmc_never_powers_it_on_fails_and_its_booking_moves(
    redfish_fleet, team, member
):
    start, cycle, _agents = redfish_fleet
    admin = PlatformAdminFactory(username="ops", email="ops@example.com")
    nodes = {bmc.hostname: bmc for bmc in (start("a"), start("b"))}
    _on_for_a_while()
    assert wait_for(
        lambda: Node.objects.filter(power_state=PowerState.OFF).exists(), poll=cycle, timeout=90
    )
    dead = Node.objects.get(power_state=PowerState.OFF)
    alive = next(hostname for hostname in nodes if hostname != dead.hostname)
    url = nodes[dead.hostname].url
    nodes[dead.hostname].stop()  # the BMC is gone: nothing can power the node on again
    start_at = (timezone.now() + timedelta(minutes=2)).replace(second=0, microsecond=0)
    booking = make_booking(
        team,
        member,
        list(Gpu.objects.filter(node=dead).order_by("index")[:2]),
        start_at,
        start_at + timedelta(hours=1),
    )
    # The booking is within reach once the lead time is two minutes.
    Node.objects.filter(pk=dead.pk).update(labels={**dead.labels, "power_resume_seconds": "120"})
    assert wait_for(lambda: _power(dead.hostname) == PowerState.RESUME_FAILED, poll=cycle)
    failed = Node.objects.get(pk=dead.pk)
    holdings = ReservationGpu.objects.filter(reservation=booking, active=True)
    assert {h.gpu.node.hostname for h in holdings} == {alive}
    assert {h.change_reason for h in holdings} == {f"node {dead.hostname} did not power back on"}
    mail = OutboxMessage.objects.get(name__contains=f"{dead.hostname} did not power on")
    assert mail.payload["recipients"] == [admin.email]
    assert f"could not connect to the BMC at {url}" in mail.payload["body"]
    assert failed.power_state_by == "power driver"
