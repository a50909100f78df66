"""GPM metrics (SM activity, occupancy, tensor activity, DRAM bandwidth) read by NvmlReader over
SimulatedNvml: supported models, NotSupported, MIG instances, errors and sample buffers, all with
pynvml's real structs and error classes."""

import json

import pynvml
import pytest

from tests.workers.test_nvml_reader import FakeClock, by_uuid, make
from workers.agent.nvml import GPM_METRICS
from workers.agent.simulated import has_gpm
from workers.protocol import SAMPLE_KEYS


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _gpm(sample: dict) -> dict:
    return {name: sample[name] for name in GPM_METRICS}


def test_gpm_models_are_hopper_and_newer():
    assert has_gpm("H100-SXM-80GB") and has_gpm("NVIDIA H200") and has_gpm("GB200")
    assert not has_gpm("A100-SXM-80GB") and not has_gpm("L40S-48GB")


def test_first_poll_has_no_interval_then_gpm_follows_the_load(clock):
    sim, reader = make(clock, gpu_count=2)
    busy, idle = sim.gpu_uuids
    sim.set_load(busy, 90)
    first = by_uuid(reader.sample())
    assert all(value is None for value in _gpm(first[busy]).values())
    clock.advance(15)
    second = by_uuid(reader.sample())
    assert second[busy]["sm_active"] == pytest.approx(0.85 * 90)
    assert second[busy]["sm_occupancy"] == pytest.approx(0.55 * 0.85 * 90, abs=0.01)
    assert second[busy]["tensor_active"] == pytest.approx(0.7 * 0.85 * 90, abs=0.01)
    assert second[busy]["dram_bw_util"] == pytest.approx(0.45 * 0.85 * 90, abs=0.01)
    assert _gpm(second[idle]) == dict.fromkeys(GPM_METRICS, 0.0)
    assert set(second[busy]) == set(SAMPLE_KEYS)
    assert json.loads(json.dumps(second[busy])) == second[busy]


def test_gpm_is_the_average_over_the_poll_interval(clock):
    sim, reader = make(clock, gpu_count=1)
    (uuid,) = sim.gpu_uuids
    reader.sample()
    sim.set_load(uuid, 100, sm_active=80)
    clock.advance(5)
    sim.set_load(uuid, 100, sm_active=20)
    clock.advance(15)
    # 5 s at 80 %, 15 s at 20 %
    assert reader.sample()[0]["sm_active"] == pytest.approx((5 * 80 + 15 * 20) / 20)


def test_tiny_kernels_read_full_utilization_but_low_sm_activity(clock):
    sim, reader = make(clock, gpu_count=1)
    (uuid,) = sim.gpu_uuids
    sim.set_load(uuid, 100, sm_active=1.5)
    reader.sample()
    clock.advance(15)
    sample = reader.sample()[0]
    assert sample["util_gpu"] >= 95 and sample["sm_active"] == pytest.approx(1.5)


@pytest.mark.parametrize("model", ["A100-SXM-80GB", "L40S-48GB"])
def test_models_without_gpm_report_null_and_are_asked_once(clock, model):
    sim, reader = make(clock, gpu_count=2, model=model, profile="busy")
    for _ in range(3):
        samples = reader.sample()
        clock.advance(15)
    assert all(_gpm(s) == dict.fromkeys(GPM_METRICS) for s in samples)
    assert all(s["util_gpu"] is not None for s in samples)  # utilization is still there
    assert sim.calls["nvmlGpmQueryDeviceSupport"] == 2
    assert sim.calls["nvmlGpmSampleGet"] == 0 and not sim.gpm_samples


def test_not_supported_from_the_driver_gives_null_and_frees_the_buffers(clock):
    sim, reader = make(clock, gpu_count=2)
    target, other = sim.gpu_uuids
    sim.inject(target, "nvmlGpmQueryDeviceSupport", pynvml.NVMLError_NotSupported)
    sim.inject(other, "nvmlGpmSampleGet", pynvml.NVMLError_NotSupported, times=None)
    for _ in range(3):
        samples = by_uuid(reader.sample())
        clock.advance(15)
    assert _gpm(samples[target]) == dict.fromkeys(GPM_METRICS)
    assert _gpm(samples[other]) == dict.fromkeys(GPM_METRICS)
    assert samples[target]["util_gpu"] is not None and samples[target]["power_w"] is not None
    assert sim.calls["nvmlGpmSampleGet"] == 1  # other: tried once, then left alone
    assert sim.gpm_samples == {}  # the buffer allocated for it was freed


def test_driver_without_gpm_functions_is_handled_like_not_supported(clock):
    sim, reader = make(clock, gpu_count=1)
    (uuid,) = sim.gpu_uuids
    sim.inject(uuid, "nvmlGpmQueryDeviceSupport", pynvml.NVMLError_FunctionNotFound)
    reader.sample()
    clock.advance(15)
    sample = reader.sample()[0]
    assert sample["sm_active"] is None and sample["util_gpu"] is not None


def test_unexpected_error_costs_one_poll_of_gpm_only(clock):
    sim, reader = make(clock, gpu_count=1, profile="busy")
    (uuid,) = sim.gpu_uuids
    reader.sample()
    clock.advance(15)
    sim.inject(uuid, "nvmlGpmSampleGet", pynvml.NVMLError_Unknown)
    sample = reader.sample()[0]
    assert sample["sm_active"] is None and sample["health"] == "healthy"
    clock.advance(15)
    assert reader.sample()[0]["sm_active"] == pytest.approx(0.85 * 92)
    assert len(sim.gpm_samples) == 2  # the previous and the spare, nothing leaked


def test_gpu_lost_during_gpm_read_is_reported_lost_and_buffers_are_freed(clock):
    sim, reader = make(clock, gpu_count=2)
    lost, other = sim.gpu_uuids
    reader.sample()
    clock.advance(15)
    sim.inject(lost, "nvmlGpmSampleGet", pynvml.NVMLError_GpuIsLost)
    samples = by_uuid(reader.sample())
    assert samples[lost]["health"] == "lost" and samples[lost]["sm_active"] is None
    assert samples[other]["sm_active"] == 0.0
    clock.advance(15)
    samples = by_uuid(reader.sample())  # re-init: new handles, GPM starts over
    assert samples[lost]["health"] == "healthy" and samples[lost]["sm_active"] is None
    assert len(sim.gpm_samples) == 2  # one per GPU, the buffers of before the re-init freed
    reader.close()
    assert sim.gpm_samples == {}


def test_mig_instances_are_read_through_their_parent(clock):
    sim, reader = make(clock, gpu_count=2, mig_gpus=1)
    parent = sim.gpu_uuids[0]
    first, second = sim.mig_uuids(parent)
    sim.set_load(first, 90, sm_active=60)
    sim.set_load(second, 10, sm_active=4)
    reader.sample()
    clock.advance(15)
    samples = by_uuid(reader.sample())
    assert samples[first]["sm_active"] == pytest.approx(60)
    assert samples[second]["sm_active"] == pytest.approx(4)
    assert samples[first]["util_gpu"] is None  # MIG: no utilization counter, GPM instead
    assert samples[parent]["sm_active"] == pytest.approx(32)  # the board: both instances
    assert sim.calls["nvmlGpmMigSampleGet"] == 4
    assert sim.calls["nvmlGpmSampleGet"] == 4  # the parent and the other GPU, twice each


def test_mig_instance_errors_cost_only_that_instance(clock):
    sim, reader = make(clock, gpu_count=1, mig_gpus=1, profile="busy")
    parent = sim.gpu_uuids[0]
    first, second = sim.mig_uuids(parent)
    sim.inject(first, "nvmlDeviceGetGpuInstanceId", pynvml.NVMLError_NotSupported)
    reader.sample()
    clock.advance(15)
    samples = by_uuid(reader.sample())
    assert samples[first]["sm_active"] is None  # no instance id: no GPM for it
    assert samples[second]["sm_active"] == pytest.approx(0.85 * 92)
    sim.inject(parent, "nvmlGpmMigSampleGet", pynvml.NVMLError_NotSupported)
    clock.advance(15)
    samples = by_uuid(reader.sample())
    assert samples[second]["sm_active"] is None and samples[parent]["sm_active"] is not None
    clock.advance(15)
    assert by_uuid(reader.sample())[second]["sm_active"] is None  # not asked again


def test_repeated_gpm_failures_stop_the_asking_until_reinit(clock):
    sim, reader = make(clock, gpu_count=1, profile="busy")
    (uuid,) = sim.gpu_uuids
    reader.sample()
    sim.inject(uuid, "nvmlGpmMetricsGet", pynvml.NVMLError_InvalidArgument, times=3)
    for _ in range(5):
        clock.advance(15)
        sample = reader.sample()[0]
        assert sample["sm_active"] is None and sample["util_gpu"] is not None
    assert sim.calls["nvmlGpmMetricsGet"] == 3  # given up after three failures in a row
    assert sim.gpm_samples == {}
    sim.lose_gpu(uuid)  # a re-init starts GPM over
    reader.sample()
    reader.sample()
    clock.advance(15)
    assert reader.sample()[0]["sm_active"] == pytest.approx(0.85 * 92)


def test_one_failure_between_successes_does_not_count_towards_giving_up(clock):
    sim, reader = make(clock, gpu_count=1, profile="busy")
    (uuid,) = sim.gpu_uuids
    reader.sample()
    for _ in range(4):
        sim.inject(uuid, "nvmlGpmMetricsGet", pynvml.NVMLError_Unknown, times=1)
        clock.advance(15)
        assert reader.sample()[0]["sm_active"] is None
        clock.advance(15)
        assert reader.sample()[0]["sm_active"] == pytest.approx(0.85 * 92)
