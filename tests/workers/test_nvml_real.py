"""NvmlReader against the real NVIDIA driver. Skipped where there is none.

On a GPU node: `pytest -m nvml -s tests/workers/test_nvml_real.py` (-s shows what NVML returned).
"""

import json
import time
from importlib.metadata import version

import pynvml
import pytest

from workers.agent.nvlink import nvlink_domains
from workers.agent.nvml import GPM_METRICS, NvmlReader
from workers.protocol import SAMPLE_KEYS

pytestmark = pytest.mark.nvml


@pytest.fixture(scope="module")
def reader():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"No NVIDIA driver here: pynvml.nvmlInit() raised {exc!r}")
    try:
        count = pynvml.nvmlDeviceGetCount()
        driver = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    if count == 0:
        pytest.skip("NVML is up but sees no GPU")
    print(f"\nNVIDIA driver {driver}, {count} GPU(s), nvidia-ml-py {version('nvidia-ml-py')}")
    reader = NvmlReader(pynvml)
    yield reader
    reader.close()


def show(title: str, value: object) -> None:
    print(f"\n--- {title} ---\n{json.dumps(value, indent=2)}")


def in_range(value: float | None, low: float, high: float) -> bool:
    return value is None or low <= value <= high


def test_inventory(reader):
    inventory = reader.inventory()
    show("inventory", inventory)
    show("nvlink_domains", nvlink_domains(inventory))
    assert inventory
    assert [gpu["index"] for gpu in inventory] == sorted(gpu["index"] for gpu in inventory)
    for gpu in inventory:
        assert gpu["uuid"].startswith("GPU-")
        assert gpu["name"]
        assert gpu["memory_mib"] > 0
        assert gpu["mig_mode"] in (True, False, None)
        assert all(m["uuid"].startswith("MIG-") for m in gpu["mig_devices"])
    assert json.loads(json.dumps(inventory)) == inventory


def test_samples_are_sane_and_energy_is_monotonic(reader):
    first = reader.sample()
    time.sleep(1)
    second = reader.sample()
    show("sample", second)
    assert json.loads(json.dumps(second)) == second
    physical = [s for s in second if s["parent_uuid"] is None]
    assert physical
    for s in second:
        assert set(s) == set(SAMPLE_KEYS)
        assert s["health"] in ("healthy", "degraded", "lost")
        assert in_range(s["util_gpu"], 0, 100) and in_range(s["util_mem"], 0, 100)
        assert in_range(s["power_w"], 0, 2000)
        assert in_range(s["temp_c"], 0, 120)
        if s["mem_used_mib"] is not None and s["mem_total_mib"] is not None:
            assert 0 <= s["mem_used_mib"] <= s["mem_total_mib"]
    before = {s["uuid"]: s for s in first}
    for s in physical:
        old = before[s["uuid"]]["energy_mj"]
        if s["energy_mj"] is None or old is None:
            print(f"{s['uuid']}: no energy counter")
            continue
        delta_j = (s["energy_mj"] - old) / 1000
        print(f"{s['uuid']}: {delta_j:.1f} J over ~1 s at {s['power_w']} W")
        assert s["energy_mj"] >= old


def test_processes(reader):
    processes = reader.processes()
    show("processes", processes)
    uuids = {s["uuid"] for s in reader.sample()}
    for proc in processes:
        assert proc["uuid"] in uuids
        assert proc["pid"] > 0


HOPPER_AND_NEWER = ("H100", "H200", "H800", "H20", "GH200", "B100", "B200", "GB200")


def test_gpm_metrics_on_hopper(reader):
    """GPM (SM activity etc.) through the real driver: values on Hopper and newer GPUs, null on
    older ones. Two polls a second apart give the first interval."""
    inventory = reader.inventory()  # before sampling: it starts GPM over
    names = {gpu["uuid"]: gpu["name"] for gpu in inventory}
    mig_mode = {gpu["uuid"]: gpu["mig_mode"] for gpu in inventory}
    reader.sample()
    time.sleep(1)
    samples = reader.sample()
    gpm = {s["uuid"]: {k: s[k] for k in GPM_METRICS} for s in samples}
    show("gpm", gpm)
    hopper = [u for u, name in names.items() if any(m in name.upper() for m in HOPPER_AND_NEWER)]
    for s in samples:
        for key in GPM_METRICS:
            assert in_range(s[key], 0, 100)
    if not hopper:
        pytest.skip(f"no Hopper or newer GPU here ({sorted(set(names.values()))})")
    for uuid in hopper:
        if mig_mode[uuid]:
            continue  # GPM of a MIG-mode board is read per instance
        assert gpm[uuid]["sm_active"] is not None, f"{names[uuid]}: no SM activity from GPM"
        assert gpm[uuid]["dram_bw_util"] is not None
