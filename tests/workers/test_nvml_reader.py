"""NvmlReader over SimulatedNvml: every NVML error path, without hardware or database."""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pynvml
import pytest

from workers.agent.backends import make_reader
from workers.agent.nvlink import nvlink_domains
from workers.agent.nvml import NvmlReader
from workers.agent.simulated import SimulatedNvml
from workers.protocol import SAMPLE_KEYS

HOST = "gpu-node-01"
IDLE_W, TDP_W = 70.0, 700.0


class FakeClock:
    def __init__(self, t: float = 1_760_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make(clock: FakeClock, **options) -> tuple[SimulatedNvml, NvmlReader]:
    sim = SimulatedNvml(HOST, clock=clock, **options)
    return sim, NvmlReader(sim, clock=clock)


def by_uuid(samples: list[dict]) -> dict[str, dict]:
    return {s["uuid"]: s for s in samples}


def test_inventory_shape(clock):
    sim, reader = make(clock, gpu_count=4)
    inventory = reader.inventory()
    assert [gpu["index"] for gpu in inventory] == [0, 1, 2, 3]
    for gpu in inventory:
        assert set(gpu) == {
            "uuid",
            "index",
            "name",
            "memory_mib",
            "mig_mode",
            "mig_devices",
            "nvlink_peers",
        }
        assert gpu["name"] == "H100-SXM-80GB"
        assert gpu["memory_mib"] == 81559
        assert gpu["mig_mode"] is False
        assert gpu["mig_devices"] == []
        assert gpu["nvlink_peers"] == [u for u in sim.gpu_uuids if u != gpu["uuid"]]


def test_uuids_are_deterministic_from_hostname_and_index(clock):
    _, reader = make(clock, gpu_count=3)
    expected = [
        "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{HOST}.gpu{i}.demo")) for i in range(3)
    ]
    assert [gpu["uuid"] for gpu in reader.inventory()] == expected
    assert [s["uuid"] for s in reader.sample()] == expected
    other = NvmlReader(SimulatedNvml("gpu-node-02", gpu_count=3, seed=7))
    assert {gpu["uuid"] for gpu in other.inventory()}.isdisjoint(expected)


def test_nvlink_one_domain_per_node(clock):
    _, reader = make(clock)
    domains = nvlink_domains(reader.inventory())
    assert len(domains) == 8
    assert set(domains.values()) == {"nvl0"}


def test_no_nvlink_no_domain(clock):
    _, reader = make(clock, nvlink=False)
    inventory = reader.inventory()
    assert all(gpu["nvlink_peers"] == [] for gpu in inventory)
    assert set(nvlink_domains(inventory).values()) == {""}


def test_nvlink_domains_are_components_numbered_by_lowest_index():
    def gpu(index: int, *peers: str) -> dict:
        return {"uuid": f"g{index}", "index": index, "nvlink_peers": list(peers)}

    # Listed out of order; g4 names g3 but g3 does not name g4 (links are still symmetric).
    inventory = [gpu(4, "g3"), gpu(2), gpu(1, "g0"), gpu(0, "g1"), gpu(3), gpu(5)]
    assert nvlink_domains(inventory) == {
        "g0": "nvl0",
        "g1": "nvl0",
        "g2": "",
        "g3": "nvl1",
        "g4": "nvl1",
        "g5": "",
    }


def test_not_supported_field_is_none_and_the_others_are_read(clock):
    sim, reader = make(clock, gpu_count=2, profile="busy")
    target, other = sim.gpu_uuids
    sim.inject(target, "nvmlDeviceGetPowerUsage", pynvml.NVMLError_NotSupported, times=None)
    sim.inject(target, "nvmlDeviceGetTemperatureV", pynvml.NVMLError_NoPermission, times=None)
    sim.inject(target, "nvmlDeviceGetTemperature", pynvml.NVMLError_NoPermission, times=None)
    for _ in range(2):
        samples = by_uuid(reader.sample())
        s = samples[target]
        assert s["power_w"] is None and s["temp_c"] is None
        assert s["util_gpu"] is not None and s["mem_used_mib"] is not None
        assert s["energy_mj"] is not None and s["ecc_uncorrected"] == 0
        assert s["health"] == "healthy"
        assert samples[other]["power_w"] is not None and samples[other]["temp_c"] is not None
        clock.advance(15)


def test_fault_injected_once_affects_one_sample_only(clock):
    sim, reader = make(clock, gpu_count=1)
    (target,) = sim.gpu_uuids
    sim.inject(target, "nvmlDeviceGetTotalEnergyConsumption", pynvml.NVMLError_NotSupported)
    assert reader.sample()[0]["energy_mj"] is None
    assert reader.sample()[0]["energy_mj"] is not None


def test_temperature_falls_back_on_old_drivers(clock):
    sim, reader = make(clock, gpu_count=1)
    (target,) = sim.gpu_uuids
    sim.inject(target, "nvmlDeviceGetTemperatureV", pynvml.NVMLError_FunctionNotFound, times=None)
    assert reader.sample()[0]["temp_c"] is not None
    assert sim.calls["nvmlDeviceGetTemperature"] == 1


def test_unexpected_nvml_error_costs_only_that_field(clock):
    sim, reader = make(clock, gpu_count=1)
    (target,) = sim.gpu_uuids
    sim.inject(target, "nvmlDeviceGetMemoryInfo", pynvml.NVMLError_Unknown)
    (s,) = reader.sample()
    assert s["mem_used_mib"] is None and s["mem_total_mib"] is None
    assert s["power_w"] is not None and s["health"] == "healthy"


def test_lost_gpu_is_reported_lost_then_recovers_after_reinit(clock):
    sim, reader = make(clock, gpu_count=3)
    lost, *others = sim.gpu_uuids
    reader.sample()
    sim.lose_gpu(lost)
    assert sim.init_count == 1

    samples = by_uuid(reader.sample())
    assert samples[lost] == dict.fromkeys(SAMPLE_KEYS) | {
        "uuid": lost,
        "ts": clock.t,
        "health": "lost",
    }
    assert all(samples[u]["health"] == "healthy" for u in others)
    assert sim.init_count == 1  # re-init waits for the next sample

    clock.advance(15)
    samples = by_uuid(reader.sample())
    assert (sim.init_count, sim.shutdown_count) == (2, 1)  # once: nvmlShutdown + nvmlInit
    assert samples[lost]["health"] == "healthy"
    assert samples[lost]["power_w"] is not None

    reader.sample()
    assert sim.init_count == 2  # healthy again: no more re-inits


def test_gpu_is_lost_on_any_single_call(clock):
    sim, reader = make(clock, gpu_count=2)
    target = sim.gpu_uuids[1]
    sim.inject(target, "nvmlDeviceGetTotalEccErrors", pynvml.NVMLError_GpuIsLost)
    assert by_uuid(reader.sample())[target]["health"] == "lost"
    assert by_uuid(reader.sample())[target]["health"] == "healthy"
    assert sim.init_count == 2


def test_gpu_lost_for_good_stays_lost(clock):
    sim, reader = make(clock, gpu_count=3)
    lost = sim.gpu_uuids[1]
    reader.inventory()
    sim.lose_gpu(lost, recovers=False)
    for _ in range(3):
        samples = reader.sample()
        assert [s["uuid"] for s in samples].count(lost) == 1
        assert by_uuid(samples)[lost]["health"] == "lost"
        assert by_uuid(samples)[lost]["util_gpu"] is None
        assert sum(s["health"] == "healthy" for s in samples) == 2
        clock.advance(15)
    # Still lost after each re-init (the handle lookup itself fails), reported under its uuid.
    assert sim.init_count == 3


def test_gpu_lost_before_the_reader_saw_it_appears_once_it_recovers(clock):
    sim, reader = make(clock, gpu_count=2)
    early = sim.gpu_uuids[0]
    sim.lose_gpu(early)  # nvmlInit already ran: only the next one brings it back
    assert [s["uuid"] for s in reader.sample()] == sim.gpu_uuids[1:]  # no uuid to report yet
    assert [s["uuid"] for s in reader.sample()] == sim.gpu_uuids
    assert sim.init_count == 2


def test_nvml_shut_down_under_the_reader_is_reinitialized(clock):
    sim, reader = make(clock, gpu_count=1)
    (target,) = sim.gpu_uuids
    sim.inject(target, "nvmlDeviceGetPowerUsage", pynvml.NVMLError_Uninitialized)
    assert reader.sample()[0]["power_w"] is None
    assert reader.sample()[0]["power_w"] is not None
    assert sim.init_count == 2


def test_handles_are_cached_until_reinit(clock):
    sim, reader = make(clock, gpu_count=4)
    reader.sample()
    reader.sample()
    reader.processes()
    assert sim.calls["nvmlDeviceGetHandleByIndex"] == 4
    sim.lose_gpu(sim.gpu_uuids[0])
    reader.sample()  # lost: re-init pending
    reader.sample()
    assert sim.calls["nvmlDeviceGetHandleByIndex"] == 8


def test_mig_devices_report_memory_and_no_utilization(clock):
    sim, reader = make(clock, gpu_count=3, mig_gpus=2)
    inventory = reader.inventory()
    assert [gpu["mig_mode"] for gpu in inventory] == [True, True, False]
    for gpu in inventory[:2]:
        assert [m["profile"] for m in gpu["mig_devices"]] == ["3g.40gb", "3g.40gb"]
        assert [m["index"] for m in gpu["mig_devices"]] == [0, 1]
        assert all(m["uuid"].startswith("MIG-") for m in gpu["mig_devices"])
        assert all(m["memory_mib"] == 81559 // 2 for m in gpu["mig_devices"])

    mig = sim.mig_uuids(sim.gpu_uuids[0])[0]
    sim.set_load(mig, 80, mem_used_mib=30_000)
    samples = reader.sample()
    assert len(samples) == 3 + 4
    s = by_uuid(samples)[mig]
    assert s["parent_uuid"] == sim.gpu_uuids[0]
    assert s["util_gpu"] is None and s["util_mem"] is None
    assert (s["mem_used_mib"], s["mem_total_mib"]) == (30_000, 81559 // 2)
    assert s["health"] == "healthy"
    parent = by_uuid(samples)[sim.gpu_uuids[0]]
    assert parent["util_gpu"] is None  # MIG-mode GPUs have no utilization counter either
    assert parent["mem_used_mib"] == 30_000 and parent["power_w"] is not None


def test_mig_profile_falls_back_to_attributes(clock):
    sim, reader = make(clock, gpu_count=1, mig_gpus=1, model="Some GPU")
    mig = sim.mig_uuids(sim.gpu_uuids[0])[0]
    sim.inject(mig, "nvmlDeviceGetName", pynvml.NVMLError_NotSupported)
    (gpu,) = reader.inventory()
    assert gpu["mig_devices"][0]["profile"] == "3g.40gb"  # 40779 MiB, rounded up to 40 GB


def test_energy_is_monotonic_and_matches_power_times_time(clock):
    sim, reader = make(clock, gpu_count=1)
    (target,) = sim.gpu_uuids
    sim.set_load(target, 50)
    energies = []
    for step in (0, 10, 10, 30):
        clock.advance(step)
        energies.append(reader.sample()[0]["energy_mj"])
    assert energies == sorted(energies)
    expected_w = IDLE_W + (TDP_W - IDLE_W) * 0.5
    assert energies[-1] - energies[0] == pytest.approx(expected_w * 50 * 1000, abs=1)

    # The counter accrues at the load in effect, including across a load change.
    clock.advance(10)
    sim.set_load(target, 100)
    clock.advance(10)
    delta = reader.sample()[0]["energy_mj"] - energies[-1]
    assert delta == pytest.approx((expected_w * 10 + TDP_W * 10) * 1000, abs=1)


def test_power_reading_is_consistent_with_energy(clock):
    sim, reader = make(clock, gpu_count=1)
    sim.set_load(sim.gpu_uuids[0], 75)
    first = reader.sample()[0]
    clock.advance(60)
    second = reader.sample()[0]
    mean_w = (second["energy_mj"] - first["energy_mj"]) / 1000 / 60
    assert second["power_w"] == pytest.approx(mean_w, abs=0.03 * (TDP_W - IDLE_W) + 0.01)


def test_load_follows_set_load(clock):
    sim, reader = make(clock, gpu_count=2)
    loaded, idle = sim.gpu_uuids
    sim.set_load(loaded, 90, mem_used_mib=60_000)
    for _ in range(20):
        samples = by_uuid(reader.sample())
        assert 87 <= samples[loaded]["util_gpu"] <= 93
        assert samples[loaded]["mem_used_mib"] == 60_000
        assert samples[loaded]["power_w"] > samples[idle]["power_w"]
        assert samples[loaded]["temp_c"] > samples[idle]["temp_c"]
        assert samples[idle]["util_gpu"] <= 3
        clock.advance(15)
    sim.set_load(loaded, None)  # back to the profile (idle)
    assert by_uuid(reader.sample())[loaded]["util_gpu"] <= 3


@pytest.mark.parametrize("profile", ["idle", "busy", "random", "diurnal"])
def test_profiles_are_reproducible_and_in_range(profile):
    def run() -> list[list[dict]]:
        clock = FakeClock()
        _, reader = make(clock, profile=profile, seed=3)
        out = []
        for _ in range(5):
            out.append(reader.sample())
            clock.advance(3600)
        return out

    runs = run()
    assert runs == run()
    for s in (s for samples in runs for s in samples):
        assert 0 <= s["util_gpu"] <= 100 and IDLE_W <= s["power_w"] <= TDP_W


def test_busy_profile_is_busier_than_idle(clock):
    _, busy = make(clock, gpu_count=2, profile="busy")
    _, idle = make(clock, gpu_count=2, profile="idle")
    assert min(s["util_gpu"] for s in busy.sample()) > 85
    assert max(s["util_gpu"] for s in idle.sample()) <= 3


def test_ecc_errors_degrade(clock):
    sim, reader = make(clock, gpu_count=2)
    bad, good = sim.gpu_uuids
    sim.set_ecc_errors(bad, 2)
    samples = by_uuid(reader.sample())
    assert samples[bad]["ecc_uncorrected"] == 2 and samples[bad]["health"] == "degraded"
    assert samples[good]["health"] == "healthy"


def test_xid_degrades_the_sample_it_arrives_in(clock):
    sim, reader = make(clock, gpu_count=2, mig_gpus=1)
    bad, good = sim.gpu_uuids
    reader.sample()  # registers for XID events
    sim.inject_xid(bad, 79)  # "GPU has fallen off the bus"
    samples = by_uuid(reader.sample())
    assert samples[bad]["xid"] == 79 and samples[bad]["health"] == "degraded"
    assert samples[good]["xid"] is None and samples[good]["health"] == "healthy"
    for mig in sim.mig_uuids(bad):  # a MIG device shares its parent's fate
        assert samples[mig]["health"] == "degraded"
    assert by_uuid(reader.sample())[bad]["xid"] is None  # events, not a level


def test_xid_queued_before_an_inventory_refresh_is_not_dropped(clock):
    sim, reader = make(clock, gpu_count=1)
    (target,) = sim.gpu_uuids
    reader.sample()
    sim.inject_xid(target, 48)
    reader.inventory()  # re-enumerates handles and recreates the event set
    assert reader.sample()[0]["xid"] == 48


def test_processes(clock):
    sim, reader = make(clock, gpu_count=3, mig_gpus=1)
    mig_gpu, plain, unsupported = sim.gpu_uuids
    mig = sim.mig_uuids(mig_gpu)[1]
    sim.add_process(plain, 4242, 10_240)
    sim.add_process(mig, 777, 2_048)
    sim.add_process(unsupported, 1, 1)
    sim.inject(
        unsupported,
        "nvmlDeviceGetComputeRunningProcesses",
        pynvml.NVMLError_NotSupported,
        times=None,
    )
    assert sorted(reader.processes(), key=lambda p: p["pid"]) == [
        {"uuid": mig, "pid": 777, "used_memory_mib": 2_048},
        {"uuid": plain, "pid": 4242, "used_memory_mib": 10_240},
    ]
    sim.remove_process(plain, 4242)
    assert [p["pid"] for p in reader.processes()] == [777]


def test_everything_is_json_serializable(clock):
    sim, reader = make(clock, gpu_count=4, mig_gpus=1, profile="random")
    sim.set_ecc_errors(sim.gpu_uuids[1], 1)
    sim.lose_gpu(sim.gpu_uuids[2], recovers=False)
    sim.inject(sim.gpu_uuids[3], "nvmlDeviceGetPowerUsage", pynvml.NVMLError_NotSupported)
    sim.add_process(sim.gpu_uuids[1], 99, 512)
    payload = {
        "inventory": reader.inventory(),
        "samples": reader.sample(),
        "processes": reader.processes(),
    }
    assert json.loads(json.dumps(payload, allow_nan=False)) == payload
    for s in payload["samples"]:
        assert set(s) == set(SAMPLE_KEYS)
        assert s["health"] in {"healthy", "degraded", "lost"}


def test_close_shuts_nvml_down_once(clock):
    sim, reader = make(clock, gpu_count=1)
    reader.sample()
    reader.close()
    reader.close()
    assert (sim.init_count, sim.shutdown_count) == (1, 1)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvmlDeviceGetCount()


def test_inject_rejects_unknown_functions_and_gpus(clock):
    sim, _ = make(clock, gpu_count=1)
    with pytest.raises(ValueError, match="nvmlDeviceGetPowerUsge"):
        sim.inject(sim.gpu_uuids[0], "nvmlDeviceGetPowerUsge", pynvml.NVMLError_NotSupported)
    with pytest.raises(KeyError):
        sim.inject("GPU-nope", "nvmlDeviceGetPowerUsage", pynvml.NVMLError_NotSupported)


def test_make_reader(clock):
    reader = make_reader("simulated", HOST, gpu_count=2, clock=clock)
    assert isinstance(reader.nvml, SimulatedNvml)
    assert [s["ts"] for s in reader.sample()] == [clock.t, clock.t]
    with pytest.raises(ValueError, match="Unknown NVML backend"):
        make_reader("fake", HOST)


def test_agent_modules_import_without_django():
    code = (
        "import sys, workers.agent.backends, workers.agent.simulated;"
        "sys.exit('django' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=root, check=False).returncode == 0
