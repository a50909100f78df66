"""The power policy's rules: what keeps a node on, what wakes one, no thrashing, the warm
reserve, the opt-out, and a node that does not come back."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from apps.fleet.choices import PowerState
from apps.fleet.models import Gpu, Node, NodePowerEvent
from apps.fleet.services import node_power_observed, node_power_request
from apps.jobs.choices import JobStatus
from apps.jobs.models import JobAllocation
from apps.jobs.scheduler.state import PendingReason
from apps.outbox.models import OutboxMessage
from apps.power import selectors, services
from apps.reservations.models import ReservationGpu
from tests.factories import JobFactory, PlatformAdminFactory, make_booking
from tests.power.conftest import idle_telemetry

pytestmark = pytest.mark.django_db


def _state(hostname: str) -> str:
    return Node.objects.get(hostname=hostname).power_state


def _down(**kwargs) -> list[str]:
    return services.power_down_idle(**kwargs)


def _gpus(hostname: str) -> list[Gpu]:
    return list(Gpu.objects.filter(node__hostname=hostname).order_by("index"))


def _powered_off(hostname: str, *, ago: timedelta = timedelta(hours=1)) -> Node:
    node = Node.objects.get(hostname=hostname)
    node_power_request(node=node, operation="power_off", actor=None, reason="idle")
    node_power_observed(node=node, operation="suspended", reason="driver: off")
    Node.objects.filter(pk=node.pk).update(power_state_since=timezone.now() - ago)
    return Node.objects.get(pk=node.pk)


# --- powering down ---------------------------------------------------------------------------


def test_idle_nodes_power_down_recorded_as_the_policy(idle_fleet):
    assert sorted(_down()) == ["h100-a", "h100-b", "l40s-a"]
    node = Node.objects.get(hostname="h100-a")
    assert (node.power_state, node.power_state_by) == (PowerState.SUSPENDING, "power policy")
    assert NodePowerEvent.objects.get(node=node).reason == "idle for 30 min"


def test_nothing_powers_down_with_power_saving_off(idle_fleet, settings):
    settings.POWER_SAVE_ENABLED = False
    report = services.power_policy_cycle()
    assert report["powered_down"] == []
    assert set(Node.objects.values_list("power_state", flat=True)) == {PowerState.ON}


def test_a_busy_minute_inside_the_idle_window_keeps_the_node_on(idle_fleet):
    gpu = _gpus("h100-a")[3]
    from apps.telemetry.models import GpuMinuteRollup

    GpuMinuteRollup.objects.filter(gpu=gpu).order_by("-bucket").filter(
        bucket__gte=timezone.now() - timedelta(minutes=10)
    ).update(busy_seconds=12)
    assert "h100-a" not in _down()
    assert _state("h100-a") == PowerState.ON


def test_missing_telemetry_is_never_taken_for_idleness(idle_fleet):
    from apps.telemetry.models import GpuMinuteRollup

    GpuMinuteRollup.objects.filter(gpu__node__hostname="h100-b").delete()
    idle_telemetry(_gpus("h100-b"), minutes=10)  # a third of the window only
    assert "h100-b" not in _down()


def test_a_running_job_keeps_its_node_on(idle_fleet, team):
    job = JobFactory(team=team, status=JobStatus.RUNNING, started_at=timezone.now())
    JobAllocation.objects.create(job=job, gpu=_gpus("h100-a")[0], start=timezone.now())
    assert "h100-a" not in _down()


def test_a_job_that_ended_within_the_idle_window_keeps_its_node_on(idle_fleet, team):
    now = timezone.now()
    job = JobFactory(team=team, status=JobStatus.SUCCEEDED)
    JobAllocation.objects.create(
        job=job,
        gpu=_gpus("h100-a")[0],
        start=now - timedelta(hours=1),
        end=now - timedelta(minutes=5),
    )
    assert "h100-a" not in _down()


def test_a_booking_running_now_keeps_its_node_on(idle_fleet, team, member):
    now = timezone.now()
    make_booking(
        team, member, _gpus("h100-a")[:1], now - timedelta(hours=1), now + timedelta(hours=1)
    )
    assert "h100-a" not in _down()


def test_a_booking_within_resume_time_plus_margin_keeps_its_node_on(idle_fleet, team, member):
    now = timezone.now()
    lead = timedelta(seconds=300 + 600)
    make_booking(
        team, member, _gpus("h100-a")[:1], now + lead - timedelta(minutes=2), now + lead * 2
    )
    make_booking(
        team, member, _gpus("h100-b")[:1], now + lead + timedelta(minutes=5), now + lead * 3
    )
    down = _down()
    assert "h100-a" not in down
    assert "h100-b" in down  # its booking starts after it could be back


def test_a_queued_job_that_could_start_keeps_nodes_of_its_model_on(idle_fleet, team):
    JobFactory(team=team, gpu_count=4, gpu_model=_gpus("h100-a")[0].model)
    assert sorted(_down()) == ["l40s-a"]


def test_a_job_held_back_by_its_quota_keeps_no_node_on(idle_fleet, team):
    JobFactory(
        team=team,
        gpu_count=4,
        gpu_model=_gpus("h100-a")[0].model,
        pending_reason=PendingReason.QUOTA_REACHED,
    )
    assert sorted(_down()) == ["h100-a", "h100-b", "l40s-a"]


def test_the_warm_reserve_of_each_model_stays_on(idle_fleet, settings):
    settings.POWER_SAVE_WARM_GPUS = "H100-SXM-80GB=8,*=0"
    down = _down()
    assert sorted(down) == ["h100-b", "l40s-a"] or sorted(down) == ["h100-a", "l40s-a"]
    settings.POWER_SAVE_WARM_GPUS = "4"  # every model
    assert _down() == []  # the last H100 node and the L40S node (4 GPUs) both stay


def test_warm_gpus_setting_is_read_as_documented():
    assert selectors.warm_gpus_by_model("2") == {"*": 2}
    assert selectors.warm_gpus_by_model("H100=8, *=1") == {"*": 1, "H100": 8}
    assert selectors.warm_gpus_for("L40S", {"*": 1, "H100": 8}) == 1
    assert selectors.warm_gpus_for("L40S", selectors.warm_gpus_by_model("H100=8")) == 0


@pytest.mark.parametrize("bad", ["lots", "H100=many", "-1", "=3", "H100=8,L40S"])
def test_a_bad_warm_gpus_setting_says_how_to_write_it(bad):
    with pytest.raises(ImproperlyConfigured, match="POWER_SAVE_WARM_GPUS") as refused:
        selectors.warm_gpus_by_model(bad)
    assert "MODEL=N" in str(refused.value)


def test_a_node_labelled_never_stays_on(idle_fleet):
    Node.objects.filter(hostname="h100-a").update(labels={"power_save": "never"})
    assert "h100-a" not in _down()
    assert _state("h100-a") == PowerState.ON


def test_a_node_just_back_on_stays_on_for_the_minimum_on_time(idle_fleet, settings):
    settings.POWER_MIN_ON_MINUTES = 60
    Node.objects.filter(hostname="h100-a").update(
        power_state_since=timezone.now() - timedelta(minutes=45)
    )
    assert "h100-a" not in _down()


def test_a_node_powers_down_at_most_max_cycles_a_day(idle_fleet, settings):
    settings.POWER_MAX_CYCLES_PER_DAY = 2
    node = Node.objects.get(hostname="h100-a")
    for hours in (20, 10):
        NodePowerEvent.objects.create(
            node=node,
            from_state="on",
            to_state="suspending",
            at=timezone.now() - timedelta(hours=hours),
        )
    assert "h100-a" not in _down()
    NodePowerEvent.objects.filter(node=node).update(at=timezone.now() - timedelta(hours=25))
    assert "h100-a" in _down()


# --- waking ----------------------------------------------------------------------------------


def test_a_booking_ahead_wakes_its_node_by_its_lead_time_even_with_power_saving_off(
    idle_fleet, settings, team, member
):
    settings.POWER_SAVE_ENABLED = False
    node = _powered_off("h100-a")
    now = timezone.now()
    far = make_booking(
        team, member, _gpus("h100-a")[:1], now + timedelta(hours=2), now + timedelta(hours=3)
    )
    assert services.power_wake() == []
    ReservationGpu.objects.filter(reservation=far).update(start=now + timedelta(minutes=14))
    assert services.power_wake() == ["h100-a"]
    node.refresh_from_db()
    assert node.power_state == PowerState.RESUMING
    assert (
        NodePowerEvent.objects.filter(node=node).last().reason == f"booking #{far.pk} starts soon"
    )


def test_queued_jobs_wake_enough_nodes_of_their_model_after_the_minimum_off_time(
    idle_fleet, team, settings
):
    h100 = _gpus("h100-a")[0].model
    for host in ("h100-a", "h100-b"):
        _powered_off(host, ago=timedelta(minutes=2))
    JobFactory(team=team, gpu_count=4, gpu_model=h100, pending_reason=PendingReason.NO_CAPACITY)
    assert services.power_wake() == []  # off for 2 of the 5 minimum minutes
    Node.objects.filter(hostname__startswith="h100").update(
        power_state_since=timezone.now() - timedelta(minutes=6)
    )
    woken = services.power_wake()
    assert len(woken) == 1 and woken[0].startswith("h100")
    # The next cycle counts the node already resuming: nothing more to wake.
    assert services.power_wake() == []


def test_a_guarantee_reclaim_wakes_a_node_at_once(idle_fleet, team):
    h100 = _gpus("h100-a")[0].model
    for host in ("h100-a", "h100-b"):
        _powered_off(host, ago=timedelta(seconds=30))  # within the minimum off time
    JobFactory(
        team=team, gpu_count=2, gpu_model=h100, pending_reason=PendingReason.RECLAIMING_GUARANTEE
    )
    assert len(services.power_wake()) == 1
    assert NodePowerEvent.objects.last().reason == "woken for a guarantee reclaim"


def test_a_job_that_fits_the_free_gpus_wakes_nothing(idle_fleet, team):
    _powered_off("h100-a")
    JobFactory(team=team, gpu_count=4, gpu_model=_gpus("h100-b")[0].model)
    assert services.power_wake() == []


# --- the driver and its answers --------------------------------------------------------------


def test_the_driver_is_asked_and_its_answer_settles_the_state(idle_fleet, power_saving):
    _down()
    assert services.power_apply_request(node_id=idle_fleet[0].pk, operation="power_off") == (
        "h100-a: power_off asked"
    )
    folder = Path(power_saving.POWER_SIMULATED_DIR)
    assert (folder / "h100-a.switch").read_text() == "off"
    # The simulated node has not answered yet: still powering off.
    assert services.power_settle()["suspended"] == []
    (folder / "h100-a.state").write_text("off")
    assert services.power_settle()["suspended"] == ["h100-a"]
    assert _state("h100-a") == PowerState.OFF
    # A repeated request for a state that moved on asks nothing.
    assert "nothing to ask" in services.power_apply_request(
        node_id=idle_fleet[0].pk, operation="power_off"
    )


def test_a_driver_that_cannot_power_off_leaves_the_node_on(idle_fleet):
    Node.objects.filter(hostname="h100-a").update(labels={"power_driver": "nonexistent"})
    _down()
    message = services.power_apply_request(node_id=idle_fleet[0].pk, operation="power_off")
    assert "unknown power driver 'nonexistent'" in message
    node = Node.objects.get(hostname="h100-a")
    assert node.power_state == PowerState.ON
    assert NodePowerEvent.objects.filter(node=node).last().to_state == "on"


def test_a_node_not_on_within_the_timeout_fails_its_bookings_move_and_admins_are_mailed(
    idle_fleet, settings, team, member
):
    admin = PlatformAdminFactory(username="ops", email="ops@example.com")
    node = _powered_off("h100-a")
    start = (timezone.now() + timedelta(minutes=10)).replace(second=0, microsecond=0)
    booking = make_booking(team, member, _gpus("h100-a")[:2], start, start + timedelta(hours=1))
    assert services.power_wake() == ["h100-a"]
    services.power_apply_request(node_id=node.pk, operation="power_on")
    # Before the timeout: still resuming.
    assert services.power_settle()["resume_failed"] == []
    later = timezone.now() + timedelta(seconds=settings.POWER_RESUME_TIMEOUT_SECONDS + 1)
    assert services.power_settle(now=later)["resume_failed"] == ["h100-a"]
    assert _state("h100-a") == PowerState.RESUME_FAILED
    holdings = ReservationGpu.objects.filter(reservation=booking, active=True)
    assert {h.gpu.node.hostname for h in holdings} == {"h100-b"}
    mail = OutboxMessage.objects.get(name__contains="did not power on")
    assert mail.payload["recipients"] == [admin.email]
    assert "h100-a" in mail.payload["body"] and "moved" in mail.payload["body"]
    # It comes back later after all: on again, no second mail.
    (Path(settings.POWER_SIMULATED_DIR) / "h100-a.state").write_text("on")
    assert services.power_settle()["resumed"] == ["h100-a"]
    assert _state("h100-a") == PowerState.ON
    assert OutboxMessage.objects.filter(name__contains="did not power on").count() == 1


def test_a_driver_error_on_power_on_is_a_resume_failure_with_its_message(idle_fleet):
    PlatformAdminFactory(username="ops", email="ops@example.com")
    node = _powered_off("h100-a")
    Node.objects.filter(pk=node.pk).update(labels={"power_driver": "command"})
    node_power_request(node=node, operation="power_on", actor=None)
    services.power_apply_request(node_id=node.pk, operation="power_on")
    assert _state("h100-a") == PowerState.RESUME_FAILED
    event = NodePowerEvent.objects.filter(node=node).last()
    assert event.reason == "Node h100-a: POWER_COMMAND_ON is not set."
    assert OutboxMessage.objects.filter(name__contains="h100-a did not power on").exists()
