"""Power saving in the trace replayer (``replay_trace --power-save-after``) and the shared
power rule (``apps.fleet.power_rules``), on traces small enough to work out by hand."""

import json
import random
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from apps.fleet.power_rules import (
    Demand,
    NodePower,
    OffNode,
    PowerSaving,
    next_power_down_check,
    nodes_to_wake,
    power_down_refusal,
)
from apps.jobs.scheduler.replay import TraceJob, simulate
from apps.jobs.scheduler.trace import default_quotas, parse_fleet

# Two 8-GPU nodes; an 8-GPU job of an hour at 0 and another at 2 h.
TWO_JOBS = "submit,duration,gpus,team\n0,3600,8,a\n7200,3600,8,a\n"


def _replay(tmp_path, *extra):
    trace = tmp_path / "jobs.csv"
    trace.write_text(TWO_JOBS)
    out = StringIO()
    call_command("replay_trace", str(trace), "--fleet", "2x8:GPU", "--out", str(tmp_path),
                 *extra, stdout=out)  # fmt: skip
    return json.loads((tmp_path / "replay.json").read_text())["results"], out.getvalue()


def test_node_hours_off_as_worked_out_by_hand(tmp_path):
    results, text = _replay(tmp_path, "--power-save-after", "1800", "--resume-seconds", "300")
    assert set(results) == {"fairshare", "always-on", "fifo"}
    saved, always_on = results["fairshare"], results["always-on"]
    # Job 1 runs on one node 0-1 h; the other node idles from 0 and powers down at 0.5 h. The
    # first node idles from 1 h and powers down at 1.5 h. Job 2 (at 2 h) wakes the node off
    # longest (since 0.5 h), which takes work at 2 h + 300 s: job 2 runs 7500-11100 s.
    # Off: 1800-7200 s and 5400-11100 s = 11,100 s; idle (on or off): 3600-11100 s on the
    # first node and 0-7500 s on the second = 15,000 s.
    assert saved["node_hours_off"] == pytest.approx(11100 / 3600)
    assert saved["idle_node_hours"] == pytest.approx(15000 / 3600)
    assert saved["energy_saved_kwh"] == pytest.approx(11100 / 3600 * 0.4)
    assert saved["power_cycles"] == 2 and saved["max_cycles_per_node_day"] == 1
    assert saved["bookings_late"] == 0
    assert saved["bookings_late_reason"] == "replay has no bookings"
    assert saved["avg_jct"] == pytest.approx((3600 + 3900) / 2)
    assert saved["power_saving"]["warm_gpus"] == 0
    # Always on, job 2 goes to the first node again (best fit, by name): 1-2 h and 0-3 h idle.
    assert always_on["node_hours_off"] == 0 and always_on["power_saving"] is None
    assert always_on["idle_node_hours"] == pytest.approx(4.0)
    assert always_on["avg_jct"] == 3600
    assert "energy saved 1.2 kWh" in text and "average JCT added +0.042 h (+4.17%)" in text
    assert "bookings started late 0 (replay has no bookings)" in text


def test_warm_reserve_keeps_a_node_on(tmp_path):
    results, _ = _replay(tmp_path, "--power-save-after", "1800", "--warm-gpus", "8",
                         "--idle-watts", "500")  # fmt: skip
    saved = results["fairshare"]
    # At 0.5 h the idle node is the only 8 idle GPUs: it stays on. At 1 h job 1 ends, 16 GPUs
    # idle: the second node powers down (8 stay on) until the end at 3 h; job 2 starts at
    # once on the first node.
    assert saved["power_cycles"] == 1
    assert saved["node_hours_off"] == pytest.approx(2.0)
    assert saved["energy_saved_kwh"] == pytest.approx(2.0 * 0.5)
    assert saved["avg_jct"] == 3600


def test_no_node_powers_down_more_than_the_daily_limit():
    gpus = parse_fleet("1x8:GPU")
    # A one-minute job every hour for ten hours: the node idles 59 minutes between them.
    jobs = [TraceJob(k, k * 3600.0, 60.0, 8, "a") for k in range(10)]
    saving = PowerSaving(600, 60, warm_gpus=0, max_cycles_per_day=4, min_on_seconds=0,
                         min_off_seconds=0)  # fmt: skip
    result = simulate(jobs, gpus, default_quotas(gpus, ["a"]), "fairshare", power_saving=saving)
    assert result.finished == 10
    assert result.power_cycles == 4 and result.max_cycles_per_node_day == 4
    # Off from 10 min after a job's end to the next job's arrival: the first job ends at 60 s
    # (off 660-3600 s); the next ones start after the 60 s resume and end 120 s past the hour
    # (off 2,880 s each).
    assert result.node_hours_off == pytest.approx((2940 + 3 * 2880) / 3600)
    assert result.avg_jct == pytest.approx((60 + 4 * 120 + 5 * 60) / 10)


def test_power_saving_decides_alike_incremental_or_rebuilt_every_event():
    rng = random.Random(5)
    gpus = parse_fleet("4x4:GPU")
    jobs = [
        TraceJob(k, rng.uniform(0, 40_000), rng.uniform(60, 6000), rng.choice([1, 2, 4, 8]),
                 rng.choice(["a", "b"]))
        for k in range(60)
    ]  # fmt: skip
    quotas = default_quotas(gpus, ["a", "b"])
    saving = PowerSaving(900, 300, warm_gpus=4)
    runs = []
    for incremental in (True, False):
        decisions: list = []
        result = simulate(jobs, gpus, quotas, "fairshare", incremental=incremental,
                          decisions=decisions, power_saving=saving)  # fmt: skip
        runs.append((decisions, result.node_hours_off, result.power_cycles))
    assert runs[0] == runs[1]
    assert runs[0][2] > 0


@pytest.mark.parametrize(
    "option", ["--power-save-after", "--resume-seconds", "--warm-gpus", "--idle-watts"]
)
def test_negative_power_options_are_refused(tmp_path, option):
    trace = tmp_path / "jobs.csv"
    trace.write_text(TWO_JOBS)
    extra = [] if option == "--power-save-after" else ["--power-save-after", "60"]
    with pytest.raises(CommandError, match=f"{option} must not be negative"):
        call_command("replay_trace", str(trace), "--fleet", "2x8:GPU", "--out", str(tmp_path),
                     *extra, option, "-5")  # fmt: skip


# -- the rule itself ---------------------------------------------------------------------------

SAVING = PowerSaving(1800, 300, warm_gpus=8, max_cycles_per_day=2, min_on_seconds=600,
                     min_off_seconds=300)  # fmt: skip


def _node(**changes) -> NodePower:
    values = {"name": "gpu-07", "model": "H100", "gpus": 8, "idle_since": 0.0, "on_since": 0.0}
    return NodePower(**(values | changes))


def test_power_down_allowed_only_when_every_condition_holds():
    assert power_down_refusal(_node(), 1800, SAVING, idle_on_gpus=16) is None
    refusals = {
        "in use": (_node(idle_since=None), 16),
        "idle for 29 of 30 minutes": (_node(idle_since=60.0), 16),
        "excluded": (_node(opted_out=True), 16),
        "queued job could start": (_node(queued_job_fits=True), 16),
        "booking on gpu-07 starts within its resume time": (_node(next_booking_start=2400.0), 16),
        "powered down 2 times in the last 24 h": (_node(power_downs=(100.0, 900.0)), 16),
        "would leave 0 idle H100 GPUs on; the warm reserve is 8": (_node(), 8),
    }
    for reason, (node, idle_on) in refusals.items():
        assert reason in power_down_refusal(node, 1800, SAVING, idle_on)
    # Came back on a quarter of an hour ago: idle counts from then, and it must stay on 10 min.
    assert "idle for 15 of 30" in power_down_refusal(_node(on_since=900.0), 1800, SAVING, 16)
    # A booking far enough ahead (beyond resume + margin) does not keep it on.
    assert power_down_refusal(_node(next_booking_start=1800 + 901.0), 1800, SAVING, 16) is None


def test_next_check_waits_for_idle_time_and_the_oldest_cycle_to_age_out():
    assert next_power_down_check(_node(idle_since=100.0), SAVING) == 1900
    assert next_power_down_check(_node(power_downs=(50.0, 70.0, 900.0)), SAVING) == 86400 + 70
    assert next_power_down_check(_node(idle_since=None), SAVING) is None


def test_wake_the_fewest_nodes_for_queued_work():
    off = [
        OffNode("a-1", "A100", 4, off_since=0.0),
        OffNode("h-1", "H100", 8, off_since=100.0),
        OffNode("h-2", "H100", 8, off_since=50.0),
        OffNode("h-3", "H100", 8, off_since=1000.0),  # off for less than 5 min at 1200
    ]
    # 8 H100 GPUs already resuming cover the first job; the second wakes the H100 node off
    # longest, whose 4 GPUs left over cover a 2-GPU job of any model; a 6-GPU job of any
    # model wakes on the model with the most GPUs to wake.
    demands = [Demand(8, "H100"), Demand(4, "H100"), Demand(2), Demand(6)]
    woken = nodes_to_wake(demands, off, {"H100": 8}, 1200.0, SAVING)
    assert woken == ["h-2", "h-1"]
    # A 12-GPU gang across nodes wakes two; nothing to wake for a model without off nodes.
    assert nodes_to_wake([Demand(12, "H100")], off, {}, 1200.0, SAVING) == ["h-2", "h-1"]
    assert nodes_to_wake([Demand(1, "L40S")], off, {}, 1200.0, SAVING) == []


def test_impossible_settings_are_refused():
    with pytest.raises(ValueError, match="resume seconds must not be negative"):
        PowerSaving(1800, -1)
