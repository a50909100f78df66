"""Fake GPUs behind the subset of the pynvml API that `NvmlReader` calls.

Same function names and signatures as `pynvml`, results shaped like its structs, and the REAL
pynvml error classes, so every error path of the reader runs without hardware. The load of a
GPU follows what the portal places on it (`set_load`), else a profile; power, temperature, the
energy counter and the GPM metrics (SM activity etc., on models that have GPM) follow the load.
Faults are injected per GPU and function (`inject`, `lose_gpu`, `set_ecc_errors`, `inject_xid`).
"""

from __future__ import annotations

import math
import random
import time
import uuid as uuidlib
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from workers.agent.simulated_gpm import GPM_ORDER, SimulatedGpm

MIB = 1024 * 1024
PROFILES = ("idle", "busy", "random", "diurnal")
NVLINKS_PER_GPU = 18  # H100 SXM: 18 NVLink4 links...
NVSWITCHES = 4  # ...spread over the 4 NVSwitches of an HGX board
MIG_PROFILE = "3g.40gb"
MIG_PER_GPU = 2
MIG_MAX_DEVICES = 7  # what nvmlDeviceGetMaxMigDeviceCount answers on an H100
NOISE_PERCENT = 3.0
_NO_INSTANCE = 0xFFFFFFFF  # NVML's "not attributable to a GPU/compute instance"
GPM_MODELS = ("H100", "H200", "GH200", "B100", "B200", "GB200")  # Hopper and newer


def has_gpm(model: str) -> bool:
    """Whether a GPU model reports GPM metrics: Hopper and newer (H100, H200...), not A100 or
    L40S."""
    name = model.upper()
    return any(family in name for family in GPM_MODELS)


def gpu_uuid(hostname: str, index: int) -> str:
    """The portal's demo data uses the same formula: keep them in step."""
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{hostname}.gpu{index}.demo"))


def mig_uuid(hostname: str, index: int, slot: int) -> str:
    return "MIG-" + str(
        uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{hostname}.gpu{index}.mig{slot}.demo")
    )


@dataclass(frozen=True)
class SimHandle:
    """Stands for pynvml's opaque c_nvmlDevice_t."""

    uuid: str


@dataclass(eq=False)
class _FakeGpu:
    uuid: str
    index: int
    name: str
    memory_mib: int
    parent: _FakeGpu | None = field(default=None, repr=False)
    migs: list[_FakeGpu] = field(default_factory=list)
    load: float | None = None  # set_load's util; None: follow the profile
    mem_load_mib: int | None = None
    energy_mj: float = 0.0
    last_tick: float | None = None
    ecc_uncorrected: int = 0
    processes: dict[int, int] = field(default_factory=dict)  # pid -> MiB
    lost: bool = False
    recovers: bool = True
    sm_load: float | None = None  # set_load's SM activity; None: follows utilization
    gpm_totals: list[float] = field(default_factory=lambda: [0.0] * len(GPM_ORDER))
    gpm_tick: float | None = None  # GPM totals are integrals of the rates up to this time

    @property
    def physical(self) -> _FakeGpu:
        return self.parent or self


@dataclass(eq=False)  # identity: two empty sets are still different sets
class _EventSet:
    devices: set[str] = field(default_factory=set)
    queue: deque = field(default_factory=deque)


def _pci(domain: int, bus: int) -> SimpleNamespace:
    return SimpleNamespace(domain=domain, bus=bus, device=0, busId=f"{domain:08X}:{bus:02X}:00.0")


class SimulatedNvml(SimulatedGpm):
    def __init__(
        self,
        hostname: str,
        gpu_count: int = 8,
        model: str = "H100-SXM-80GB",
        memory_mib: int = 81559,
        profile: str = "idle",
        seed: int = 0,
        nvlink: bool = True,
        mig_gpus: int = 0,
        *,
        clock: Callable[[], float] = time.time,
        idle_w: float = 70.0,
        tdp_w: float = 700.0,
        gpm: bool | None = None,
    ) -> None:
        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, not {profile!r}")
        if not 0 <= mig_gpus <= gpu_count:
            raise ValueError("mig_gpus must be between 0 and gpu_count")
        self.hostname = hostname
        self.profile = profile
        self.seed = seed
        self.nvlink = nvlink
        self.clock = clock
        self.idle_w = idle_w
        self.tdp_w = tdp_w
        self.gpm = has_gpm(model) if gpm is None else gpm
        self.gpm_samples: dict[int, tuple[Any, tuple | None]] = {}  # address -> (buffer, state)
        self.calls: Counter[str] = Counter()  # function name -> calls, for tests
        self.init_count = 0
        self.shutdown_count = 0
        self._refcount = 0  # nvmlInit is reference counted, like the real library
        self._rng = random.Random(seed)
        self._faults: dict[tuple[str, str], list[Any]] = {}  # (uuid, fn) -> [error, times]
        self._event_sets: list[_EventSet] = []
        self._gpus = [
            _FakeGpu(gpu_uuid(hostname, i), i, model, memory_mib) for i in range(gpu_count)
        ]
        for gpu in self._gpus[:mig_gpus]:
            gpu.migs = [
                _FakeGpu(
                    mig_uuid(hostname, gpu.index, slot),
                    slot,
                    f"{model} MIG {MIG_PROFILE}",
                    memory_mib // 2,
                    parent=gpu,
                )
                for slot in range(MIG_PER_GPU)
            ]
        self._by_uuid = {g.uuid: g for gpu in self._gpus for g in [gpu, *gpu.migs]}

    # -- controls (not part of pynvml) -----------------------------------------------------

    @property
    def gpu_uuids(self) -> list[str]:
        return [gpu.uuid for gpu in self._gpus]

    def mig_uuids(self, uuid: str) -> list[str]:
        return [mig.uuid for mig in self._by_uuid[uuid].migs]

    def set_load(
        self,
        uuid: str,
        util_percent: float | None,
        mem_used_mib: int | None = None,
        sm_active: float | None = None,
    ):
        """What the portal placed on the GPU (or MIG device); None goes back to the profile.
        Without mem_used_mib, memory follows utilization; without sm_active, SM activity does
        (a job of tiny kernels: high utilization, low sm_active)."""
        gpu = self._by_uuid[uuid]
        self._tick(gpu.physical)  # energy so far accrues at the old load
        physical = gpu.physical
        for dev in [physical, *physical.migs]:  # GPM so far accrues at the old load
            self._accrue_gpm(dev, self.clock())
        gpu.load = util_percent
        gpu.mem_load_mib = mem_used_mib
        gpu.sm_load = sm_active

    def add_process(self, uuid: str, pid: int, used_memory_mib: int) -> None:
        self._by_uuid[uuid].processes[pid] = used_memory_mib

    def remove_process(self, uuid: str, pid: int) -> None:
        self._by_uuid[uuid].processes.pop(pid, None)

    def inject(
        self, uuid: str, function_name: str, error_class: type, times: int | None = 1
    ) -> None:
        """Make `function_name` raise `error_class()` for this GPU, `times` times (None: always)."""
        if not function_name.startswith("nvml") or not hasattr(self, function_name):
            raise ValueError(f"SimulatedNvml has no {function_name}")
        if uuid not in self._by_uuid:
            raise KeyError(uuid)
        self._faults[(uuid, function_name)] = [error_class, times]

    def lose_gpu(self, uuid: str, recovers: bool = True) -> None:
        """Every call on the GPU (and its MIG devices) raises GpuIsLost; `recovers`: until the
        next nvmlInit, else for good."""
        gpu = self._by_uuid[uuid].physical
        gpu.lost, gpu.recovers = True, recovers

    def set_ecc_errors(self, uuid: str, uncorrected: int) -> None:
        self._by_uuid[uuid].physical.ecc_uncorrected = uncorrected

    def inject_xid(self, uuid: str, xid: int) -> None:
        """Queue an XID critical-error event, as the driver does when it logs an XID."""
        gpu = self._by_uuid[uuid].physical
        event = SimpleNamespace(
            device=SimHandle(gpu.uuid),
            eventType=pynvml.nvmlEventTypeXidCriticalError,
            eventData=xid,
            gpuInstanceId=_NO_INSTANCE,
            computeInstanceId=_NO_INSTANCE,
        )
        for event_set in self._event_sets:
            if gpu.uuid in event_set.devices:
                event_set.queue.append(event)

    # -- the physics of a fake GPU ---------------------------------------------------------

    def _target_util(self, gpu: _FakeGpu, now: float) -> float:
        if gpu.load is not None:
            return gpu.load
        if gpu.migs:  # the board works as hard as its instances on average
            return sum(self._target_util(m, now) for m in gpu.migs) / len(gpu.migs)
        if self.profile == "idle":
            return 0.0
        if self.profile == "busy":
            return 92.0
        if self.profile == "random":  # a new level every 5 minutes, reproducible from the seed
            return random.Random(f"{self.seed}:{gpu.uuid}:{int(now // 300)}").uniform(0, 100)
        hour = (now % 86400) / 3600  # diurnal: UTC working day, peak at 14:00
        return 10 + 80 * max(0.0, math.sin(math.pi * (hour - 8) / 12))

    def _power_w(self, util: float) -> float:
        return self.idle_w + (self.tdp_w - self.idle_w) * min(max(util, 0.0), 100.0) / 100

    def _noisy(self, value: float) -> float:
        return min(max(value + self._rng.uniform(-NOISE_PERCENT, NOISE_PERCENT), 0.0), 100.0)

    def _mem_used_mib(self, gpu: _FakeGpu, now: float) -> int:
        if gpu.migs:
            return sum(self._mem_used_mib(m, now) for m in gpu.migs)
        if gpu.mem_load_mib is not None:
            return min(gpu.mem_load_mib, gpu.memory_mib)
        return int(gpu.memory_mib * 0.85 * self._target_util(gpu, now) / 100)

    def _tick(self, gpu: _FakeGpu) -> None:
        """Accrue energy at the current load since the last call: the counter is monotonic."""
        now = self.clock()
        if gpu.last_tick is not None and now > gpu.last_tick:
            power = self._power_w(self._target_util(gpu, now))
            gpu.energy_mj += power * (now - gpu.last_tick) * 1000
        if gpu.last_tick is None or now > gpu.last_tick:
            gpu.last_tick = now

    def _handle_of(self, uuid: str) -> SimHandle:
        return SimHandle(uuid)

    def _enter(self, fn: str, handle: SimHandle | None = None) -> Any:
        """Every call goes through here: counted, refused while NVML is not initialized."""
        self.calls[fn] += 1
        if self._refcount == 0:
            raise pynvml.NVMLError_Uninitialized()
        return None if handle is None else self._device(fn, handle)

    def _device(self, fn: str, handle: SimHandle) -> _FakeGpu:
        """The GPU behind a handle, after lost GPUs, injected faults and the energy counter."""
        gpu = self._by_uuid[handle.uuid]
        if gpu.physical.lost:
            raise pynvml.NVMLError_GpuIsLost()
        fault = self._faults.get((gpu.uuid, fn))
        if fault is not None:
            error_class, times = fault
            if times is not None:
                fault[1] -= 1
                if fault[1] <= 0:
                    del self._faults[(gpu.uuid, fn)]
            raise error_class()
        self._tick(gpu.physical)
        return gpu

    def _physical_only(self, fn: str, handle: SimHandle) -> _FakeGpu:
        gpu = self._enter(fn, handle)
        if gpu.parent is not None:  # power, temperature, energy, ECC: not per MIG instance
            raise pynvml.NVMLError_NotSupported()
        return gpu

    # -- pynvml API ------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        self.init_count += 1
        self._refcount += 1
        for gpu in self._gpus:
            if gpu.lost and gpu.recovers:
                gpu.lost = False

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.shutdown_count += 1
        self._refcount -= 1
        if self._refcount == 0:
            self._event_sets.clear()

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self._gpus):
            raise pynvml.NVMLError_InvalidArgument()
        handle = SimHandle(self._gpus[index].uuid)
        self._device("nvmlDeviceGetHandleByIndex", handle)  # lost GPUs fail here too
        return handle

    def nvmlDeviceGetUUID(self, handle: SimHandle) -> str:
        return self._enter("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: SimHandle) -> str:
        return self._enter("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetPciInfo(self, handle: SimHandle) -> SimpleNamespace:
        gpu = self._physical_only("nvmlDeviceGetPciInfo", handle)
        return _pci(gpu.index // 15, 0x10 * (gpu.index % 15 + 1))  # 0x10, 0x20, ...

    def nvmlDeviceGetMemoryInfo(self, handle: SimHandle, version: int | None = None):
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        used = self._mem_used_mib(gpu, self.clock()) * MIB
        total = gpu.memory_mib * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: SimHandle) -> SimpleNamespace:
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle)
        if gpu.parent is not None or gpu.migs:  # real MIG devices and MIG-mode GPUs: no counter
            raise pynvml.NVMLError_NotSupported()
        util = self._target_util(gpu, self.clock())
        return SimpleNamespace(gpu=round(self._noisy(util)), memory=round(self._noisy(util * 0.6)))

    def nvmlDeviceGetPowerUsage(self, handle: SimHandle) -> int:
        gpu = self._physical_only("nvmlDeviceGetPowerUsage", handle)
        util = self._noisy(self._target_util(gpu, self.clock()))
        return round(self._power_w(util) * 1000)  # milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: SimHandle) -> int:
        return int(self._physical_only("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj)

    def nvmlDeviceGetTemperatureV(
        self, handle: SimHandle, sensor: int, version: int = pynvml.nvmlTemperature_v1
    ) -> int:
        return self._temperature("nvmlDeviceGetTemperatureV", handle)

    def nvmlDeviceGetTemperature(self, handle: SimHandle, sensor: int) -> int:
        return self._temperature("nvmlDeviceGetTemperature", handle)

    def _temperature(self, fn: str, handle: SimHandle) -> int:
        gpu = self._physical_only(fn, handle)
        share = self._noisy(self._target_util(gpu, self.clock())) / 100
        return round(30 + 45 * share)  # follows power: ~30 C idle, ~75 C at TDP

    def nvmlDeviceGetTotalEccErrors(self, handle: SimHandle, errorType: int, counterType: int):
        gpu = self._physical_only("nvmlDeviceGetTotalEccErrors", handle)
        return gpu.ecc_uncorrected if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimHandle) -> list[SimpleNamespace]:
        gpu = self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        return [
            SimpleNamespace(
                pid=pid,
                usedGpuMemory=mib * MIB,
                gpuInstanceId=_NO_INSTANCE if owner.parent is None else owner.index,
                computeInstanceId=_NO_INSTANCE if owner.parent is None else 0,
            )
            for owner in [gpu, *gpu.migs]
            for pid, mib in owner.processes.items()
        ]

    def nvmlDeviceGetMigMode(self, handle: SimHandle) -> list[int]:
        gpu = self._physical_only("nvmlDeviceGetMigMode", handle)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.migs else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]  # [current, pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: SimHandle) -> int:
        gpu = self._physical_only("nvmlDeviceGetMaxMigDeviceCount", handle)
        return MIG_MAX_DEVICES if gpu.migs else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: SimHandle, index: int) -> SimHandle:
        gpu = self._physical_only("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if not gpu.migs or not 0 <= index < MIG_MAX_DEVICES:
            raise pynvml.NVMLError_InvalidArgument()
        if index >= len(gpu.migs):
            raise pynvml.NVMLError_NotFound()  # an empty slot
        return SimHandle(gpu.migs[index].uuid)

    def nvmlDeviceGetAttributes(self, handle: SimHandle) -> SimpleNamespace:
        gpu = self._enter("nvmlDeviceGetAttributes", handle)
        slices = int(MIG_PROFILE[0]) if gpu.parent is not None else 7
        return SimpleNamespace(
            multiprocessorCount=slices * 18 if gpu.parent is not None else 132,
            gpuInstanceSliceCount=slices,
            computeInstanceSliceCount=slices,
            memorySizeMB=gpu.memory_mib,
        )

    def nvmlDeviceGetNvLinkState(self, handle: SimHandle, link: int) -> int:
        self._nvlink("nvmlDeviceGetNvLinkState", handle, link)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: SimHandle, link: int) -> SimpleNamespace:
        self._nvlink("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        return _pci(0, 0x05 + link % NVSWITCHES)  # the NVSwitch at the far end

    def _nvlink(self, fn: str, handle: SimHandle, link: int) -> None:
        self._physical_only(fn, handle)
        if not self.nvlink:
            raise pynvml.NVMLError_NotSupported()
        if not 0 <= link < NVLINKS_PER_GPU:
            raise pynvml.NVMLError_InvalidArgument()

    def nvmlDeviceGetGpuInstanceId(self, handle: SimHandle) -> int:
        gpu = self._enter("nvmlDeviceGetGpuInstanceId", handle)
        if gpu.parent is None:
            raise pynvml.NVMLError_InvalidArgument()  # not a MIG device
        return gpu.index

    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        event_set = _EventSet()
        self._event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: SimHandle, eventTypes: int, eventSet: _EventSet):
        gpu = self._physical_only("nvmlDeviceRegisterEvents", handle)
        if eventTypes & pynvml.nvmlEventTypeXidCriticalError:
            eventSet.devices.add(gpu.uuid)

    def nvmlEventSetWait(self, eventSet: _EventSet, timeoutms: int) -> SimpleNamespace:
        self._enter("nvmlEventSetWait")
        if not eventSet.queue:
            raise pynvml.NVMLError_Timeout()  # the real call would wait timeoutms first
        return eventSet.queue.popleft()

    def nvmlEventSetFree(self, eventSet: _EventSet) -> None:
        self._enter("nvmlEventSetFree")
        if eventSet in self._event_sets:
            self._event_sets.remove(eventSet)
