"""Read the node's GPUs through NVML. No Django here: the agent holds no database.

`NvmlReader` calls the functions of an NVML *module object*: the real `pynvml` on GPU nodes,
or `workers.agent.simulated.SimulatedNvml` for demos and tests. Error classes and constants
always come from `pynvml` itself (it imports fine without a driver), so the simulator raises
exactly what the real library raises and every error path below is testable without hardware.

Everything returned is plain JSON types: it travels through Celery's JSON serializer.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from workers.agent.nvlink import nvlink_peers
from workers.protocol import SAMPLE_KEYS

log = logging.getLogger(__name__)

MIB = 1024 * 1024
# "This GPU or driver cannot tell you that": the field becomes None, the others are still read.
_UNAVAILABLE = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_NoPermission,
    pynvml.NVMLError_FunctionNotFound,  # driver older than the call
    pynvml.NVMLLibraryMismatchError,  # pynvml's wrapper for the same, on some calls
)
# GPU Performance Metrics (Hopper and newer), percent over the interval between two samples.
# Unlike utilization % ("some kernel ran"), SM activity says how much of the GPU worked.
GPM_METRICS = {
    "sm_active": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "tensor_active": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "dram_bw_util": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
}
_NO_GPM: dict[str, float | None] = dict.fromkeys(GPM_METRICS)
_GPM_MAX_FAILURES = 3  # then GPM is left alone on that device until NVML is re-initialised
_MIG_PROFILE = re.compile(r"\d+g\.\d+gb(?:\+\w+)*")
_MAX_EVENTS_PER_POLL = 1000  # an XID storm must not stall the poll


@dataclass
class _Device:
    uuid: str
    index: int
    handle: Any
    parent_uuid: str | None = None
    mig_mode: bool | None = None
    migs: list[_Device] = field(default_factory=list)
    parent_handle: Any = None  # MIG devices: GPM samples are taken through the parent
    gpu_instance_id: int | None = None  # MIG devices
    gpm: bool | None = None  # GPM supported; None: not asked yet
    gpm_previous: Any = None  # GPM sample of the last poll: the start of the next interval
    gpm_spare: Any = None  # an allocated sample buffer, reused for the next poll
    gpm_failures: int = 0  # GPM reads failed in a row (other than NotSupported)

    def gpm_buffers(self) -> list[Any]:
        return [b for b in (self.gpm_previous, self.gpm_spare) if b is not None]


def _lost(uuid: str, parent_uuid: str | None, ts: float) -> dict:
    return dict.fromkeys(SAMPLE_KEYS) | {
        "uuid": uuid,
        "parent_uuid": parent_uuid,
        "ts": ts,
        "health": "lost",
    }


def _pci_key(info: Any) -> str:
    # Compare PCI addresses by their numbers: the busId strings of nvmlDeviceGetPciInfo and
    # nvmlDeviceGetNvLinkRemotePciInfo are not guaranteed to be formatted alike.
    return f"{info.domain:08x}:{info.bus:02x}:{info.device:02x}"


class NvmlReader:
    """One per agent process. NVML's init is reference counted, so a reader pairs exactly one
    nvmlInit (here) with one nvmlShutdown (close)."""

    def __init__(self, nvml: Any = pynvml, *, clock: Callable[[], float] = time.time) -> None:
        self.nvml = nvml
        self._clock = clock
        self._gpus: list[_Device] | None = None  # handle cache; dropped on re-init
        self._known: dict[str, int] = {}  # uuid -> index of every GPU ever seen
        self._missing: list[str] = []  # known GPUs the last discovery did not get back
        self._events: Any = None  # XID event set
        self._pending_xids: dict[str, int] = {}
        self._reinit_pending = False
        nvml.nvmlInit()
        self._open = True

    # -- public interface ------------------------------------------------------------------

    def inventory(self) -> list[dict]:
        """Physical GPUs with their MIG devices and NVLink peers. Re-enumerates the handles,
        so a MIG layout changed since the last call is picked up."""
        self._reinit_if_pending()
        self._drop_cache()
        out = []
        pci: dict[str, str] = {}  # PCI address -> uuid of the local GPUs
        endpoints: dict[str, set[str]] = {}  # uuid -> remote PCI addresses of active links
        for gpu in self._devices():
            try:
                mem = self._call("nvmlDeviceGetMemoryInfo", gpu.handle)
                info = self._call("nvmlDeviceGetPciInfo", gpu.handle)
                entry = {
                    "uuid": gpu.uuid,
                    "index": gpu.index,
                    "name": self._call("nvmlDeviceGetName", gpu.handle),
                    "memory_mib": None if mem is None else int(mem.total // MIB),
                    "mig_mode": gpu.mig_mode,
                    "mig_devices": [self._mig_inventory(mig) for mig in gpu.migs],
                }
                endpoints[gpu.uuid] = self._nvlink_endpoints(gpu.handle)
            except pynvml.NVMLError_GpuIsLost:
                log.warning("GPU %s is lost; left out of the inventory", gpu.uuid)
                self._reinit_pending = True
                continue
            if info is not None:
                pci[_pci_key(info)] = gpu.uuid
            out.append(entry)
        peers = nvlink_peers(pci, endpoints)
        for entry in out:
            entry["nvlink_peers"] = sorted(peers[entry["uuid"]], key=self._known.__getitem__)
        return out

    def sample(self, now: float | None = None) -> list[dict]:
        """One dict (keys: SAMPLE_KEYS) per physical GPU and per MIG device."""
        self._reinit_if_pending()
        ts = float(self._clock() if now is None else now)
        try:
            gpus = self._devices()
        except pynvml.NVMLError as exc:  # NVML itself is down: driver unloaded, init failed...
            log.warning("NVML unavailable (%s): every known GPU reported lost", exc)
            self._reinit_pending = True
            return [_lost(uuid, None, ts) for uuid in self._known]
        self._drain_xids()
        xids, self._pending_xids = self._pending_xids, {}
        out = [_lost(uuid, None, ts) for uuid in self._missing]
        for gpu in gpus:
            parent = self._sample_device(gpu, None, ts, xids)
            out.append(parent)
            out.extend(self._sample_device(mig, parent, ts, xids) for mig in gpu.migs)
        return out

    def processes(self) -> list[dict]:
        """Compute processes: {uuid, pid, used_memory_mib}. In MIG mode the per-instance lists
        are asked for: the parent's aggregate needs root and would count each process twice."""
        self._reinit_if_pending()
        try:
            gpus = self._devices()
        except pynvml.NVMLError as exc:
            log.warning("NVML unavailable (%s): no processes reported", exc)
            self._reinit_pending = True
            return []
        out = []
        for gpu in gpus:
            for dev in gpu.migs if gpu.mig_mode else [gpu]:
                try:
                    procs = self._call("nvmlDeviceGetComputeRunningProcesses", dev.handle)
                except pynvml.NVMLError_GpuIsLost:
                    self._reinit_pending = True
                    continue
                for proc in procs or []:
                    used = proc.usedGpuMemory  # None where the driver cannot tell (WDDM)
                    out.append(
                        {
                            "uuid": dev.uuid,
                            "pid": int(proc.pid),
                            "used_memory_mib": None if used is None else int(used // MIB),
                        }
                    )
        return out

    def close(self) -> None:
        if not self._open:
            return
        self._drop_cache()
        self._open = False
        try:
            self.nvml.nvmlShutdown()
        except pynvml.NVMLError as exc:  # already down (a failed re-init): nothing to release
            log.debug("nvmlShutdown: %s", exc)

    def __enter__(self) -> NvmlReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- discovery and handle cache --------------------------------------------------------

    def _devices(self) -> list[_Device]:
        if self._gpus is None:
            self._gpus = self._discover()
            self._register_xid_events(self._gpus)
        return self._gpus

    def _discover(self) -> list[_Device]:
        nvml = self.nvml
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                gpu = _Device(nvml.nvmlDeviceGetUUID(handle), index, handle)
                gpu.mig_mode = self._mig_mode(handle)
                if gpu.mig_mode:
                    gpu.migs = self._mig_devices(gpu)
            except pynvml.NVMLError as exc:
                # Reported through _missing under the uuid it had before. A GPU that fails
                # before the reader ever saw it has no uuid to report: only this log line.
                log.warning("GPU %d could not be enumerated: %r", index, exc)
                self._reinit_pending = True  # try to get it back before the next sample
                continue
            self._known[gpu.uuid] = index
            gpus.append(gpu)
        found = {gpu.uuid for gpu in gpus}
        self._missing = [uuid for uuid in self._known if uuid not in found]
        if self._missing:  # gone from the count altogether: retry as well
            self._reinit_pending = True
        return gpus

    def _mig_mode(self, handle: Any) -> bool | None:
        try:
            current, _pending = self.nvml.nvmlDeviceGetMigMode(handle)
        except _UNAVAILABLE:
            return None  # pre-Ampere or consumer GPU: no MIG at all
        return current == pynvml.NVML_DEVICE_MIG_ENABLE

    def _mig_devices(self, gpu: _Device) -> list[_Device]:
        nvml = self.nvml
        migs = []
        for slot in range(self._call("nvmlDeviceGetMaxMigDeviceCount", gpu.handle) or 0):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
            except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
                continue  # empty slot
            mig = _Device(nvml.nvmlDeviceGetUUID(handle), slot, handle, gpu.uuid)
            mig.parent_handle = gpu.handle
            mig.gpu_instance_id = self._call("nvmlDeviceGetGpuInstanceId", handle)
            migs.append(mig)
        return migs

    def _drop_cache(self) -> None:
        self._drain_xids()  # keep XIDs already queued in the set being freed
        self._free_gpm_samples()
        if self._events is not None:
            try:
                self.nvml.nvmlEventSetFree(self._events)
            except pynvml.NVMLError as exc:
                log.debug("nvmlEventSetFree: %s", exc)
        self._events = None
        self._gpus = None

    def _reinit_if_pending(self) -> None:
        """nvmlShutdown + nvmlInit, once, after a call saw a GPU lost (or NVML shut down under
        us): the way to get valid handles back once the GPU recovers."""
        if not self._reinit_pending:
            return
        self._reinit_pending = False
        self._drop_cache()
        try:
            self.nvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            log.debug("nvmlShutdown before re-init: %s", exc)
        try:
            self.nvml.nvmlInit()
        except pynvml.NVMLError as exc:
            log.warning("NVML re-init failed (%s); retrying before the next sample", exc)
            self._reinit_pending = True

    # -- reading ---------------------------------------------------------------------------

    def _call(self, name: str, *args: Any) -> Any:
        """One NVML read. GpuIsLost propagates (the whole GPU is gone); anything else costs only
        this field."""
        try:
            return getattr(self.nvml, name)(*args)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except _UNAVAILABLE:
            return None
        except pynvml.NVMLError_Uninitialized:
            self._reinit_pending = True  # someone shut NVML down under us
            return None
        except pynvml.NVMLError as exc:
            log.warning("%s failed: %s", name, exc)
            return None

    def _sample_device(self, dev: _Device, parent: dict | None, ts: float, xids: dict) -> dict:
        try:
            sample = self._read(dev, ts, xids)
        except pynvml.NVMLError_GpuIsLost:
            self._reinit_pending = True
            return _lost(dev.uuid, dev.parent_uuid, ts)
        bad = (sample["ecc_uncorrected"] or 0) > 0 or sample["xid"] is not None
        if parent is not None:  # a MIG device shares its parent's memory and power
            bad = bad or parent["health"] != "healthy"
        sample["health"] = "degraded" if bad else "healthy"
        return sample

    def _read(self, dev: _Device, ts: float, xids: dict) -> dict:
        handle = dev.handle
        util = self._call("nvmlDeviceGetUtilizationRates", handle)  # NotSupported on MIG
        mem = self._call("nvmlDeviceGetMemoryInfo", handle)
        sample = dict.fromkeys(SAMPLE_KEYS) | {
            "uuid": dev.uuid,
            "parent_uuid": dev.parent_uuid,
            "ts": ts,
            "util_gpu": None if util is None else int(util.gpu),
            "util_mem": None if util is None else int(util.memory),
            "mem_used_mib": None if mem is None else int(mem.used // MIB),
            "mem_total_mib": None if mem is None else int(mem.total // MIB),
        }
        sample.update(self._gpm_read(dev))
        if dev.parent_uuid is not None:
            return sample  # power, temperature, energy and ECC belong to the physical GPU
        power_mw = self._call("nvmlDeviceGetPowerUsage", handle)
        sample["power_w"] = None if power_mw is None else power_mw / 1000
        sample["temp_c"] = self._temperature(handle)
        sample["energy_mj"] = self._call("nvmlDeviceGetTotalEnergyConsumption", handle)
        sample["ecc_uncorrected"] = self._call(
            "nvmlDeviceGetTotalEccErrors",
            handle,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        sample["xid"] = xids.get(dev.uuid)
        return sample

    # -- GPM -------------------------------------------------------------------------------

    def _gpm_read(self, dev: _Device) -> dict[str, float | None]:
        """GPM metrics over the interval since the previous poll: one GPM sample per poll and
        device, the previous one kept (so the first poll of a device has none). Null where the
        GPU has no GPM (NotSupported: pre-Hopper, or a driver without it)."""
        if dev.gpm is False:
            return _NO_GPM
        try:
            if dev.gpm is None:
                dev.gpm = self._gpm_supported(dev)
                if not dev.gpm:
                    return _NO_GPM
            fresh = dev.gpm_spare if dev.gpm_spare is not None else self.nvml.nvmlGpmSampleAlloc()
            dev.gpm_spare = fresh  # still ours (freed later) if taking the sample fails
            if dev.parent_handle is not None:
                self.nvml.nvmlGpmMigSampleGet(dev.parent_handle, dev.gpu_instance_id, fresh)
            else:
                self.nvml.nvmlGpmSampleGet(dev.handle, fresh)
            previous, dev.gpm_previous, dev.gpm_spare = dev.gpm_previous, fresh, None
            if previous is None:
                return _NO_GPM
            dev.gpm_spare = previous
            metrics = self._gpm_metrics(previous, fresh)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except _UNAVAILABLE:
            dev.gpm = False
            self._free_gpm(dev)
            return _NO_GPM
        except pynvml.NVMLError as exc:
            # e.g. a board in MIG mode that only answers per instance: stop asking after a
            # few polls instead of logging the same failure every poll
            dev.gpm_failures += 1
            if dev.gpm_failures >= _GPM_MAX_FAILURES:
                log.warning(
                    "GPM of %s left alone after %d failures: %s", dev.uuid, dev.gpm_failures, exc
                )
                dev.gpm = False
                self._free_gpm(dev)
            else:
                log.info("GPM read of %s failed: %s", dev.uuid, exc)
            return _NO_GPM
        dev.gpm_failures = 0
        return metrics

    def _gpm_supported(self, dev: _Device) -> bool:
        if dev.parent_handle is not None and dev.gpu_instance_id is None:
            return False
        support = self.nvml.nvmlGpmQueryDeviceSupport(dev.parent_handle or dev.handle)
        return bool(support.isSupportedDevice)

    def _gpm_metrics(self, first: Any, second: Any) -> dict[str, float | None]:
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = first, second
        for slot, metric_id in enumerate(GPM_METRICS.values()):
            request.metrics[slot].metricId = metric_id
        self.nvml.nvmlGpmMetricsGet(request)
        out: dict[str, float | None] = {}
        for slot, name in enumerate(GPM_METRICS):
            metric = request.metrics[slot]
            valid = metric.nvmlReturn == pynvml.NVML_SUCCESS and math.isfinite(metric.value)
            # percentages; rounding can step just past 100, which ingest would refuse
            out[name] = round(min(max(metric.value, 0.0), 100.0), 2) if valid else None
        return out

    def _free_gpm(self, dev: _Device) -> None:
        for buffer in dev.gpm_buffers():
            try:
                self.nvml.nvmlGpmSampleFree(buffer)
            except pynvml.NVMLError as exc:
                log.debug("nvmlGpmSampleFree: %s", exc)
        dev.gpm_previous = dev.gpm_spare = None

    def _free_gpm_samples(self) -> None:
        for gpu in self._gpus or []:
            for dev in [gpu, *gpu.migs]:
                self._free_gpm(dev)

    def _temperature(self, handle: Any) -> int | None:
        # nvmlDeviceGetTemperature is deprecated (gone in CUDA 14); drivers before the V form
        # answer FunctionNotFound to it, so fall back.
        for name in ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"):
            value = self._call(name, handle, pynvml.NVML_TEMPERATURE_GPU)
            if value is not None:
                return int(value)
        return None

    def _mig_inventory(self, mig: _Device) -> dict:
        name = self._call("nvmlDeviceGetName", mig.handle) or ""
        mem = self._call("nvmlDeviceGetMemoryInfo", mig.handle)
        memory_mib = None if mem is None else int(mem.total // MIB)
        match = _MIG_PROFILE.search(name)  # "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
        profile = match.group(0) if match else None
        if profile is None or memory_mib is None:
            attrs = self._call("nvmlDeviceGetAttributes", mig.handle)
            if attrs is not None:
                memory_mib = memory_mib if memory_mib is not None else int(attrs.memorySizeMB)
                # Profile names round the memory up to whole GB ("3g.40gb" has ~39.5 GiB).
                gb = math.ceil(attrs.memorySizeMB / 1024)
                profile = profile or f"{attrs.gpuInstanceSliceCount}g.{gb}gb"
        return {"uuid": mig.uuid, "index": mig.index, "profile": profile, "memory_mib": memory_mib}

    def _nvlink_endpoints(self, handle: Any) -> set[str]:
        """PCI addresses at the far end of this GPU's active NVLink links: a peer GPU, or an
        NVSwitch that the GPU shares with the other GPUs of the board."""
        ends = set()
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                if self.nvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                ends.add(_pci_key(self.nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)))
            except pynvml.NVMLError_GpuIsLost:
                raise
            except pynvml.NVMLError:
                # NotSupported: no NVLink (PCIe card); InvalidArgument: past this GPU's links.
                continue
        return ends

    # -- XIDs ------------------------------------------------------------------------------

    def _register_xid_events(self, gpus: list[_Device]) -> None:
        """NVML reports XIDs only as events, so register once per discovery and drain the set
        at each sample: `xid` is the last XID seen since the previous sample."""
        try:
            self._events = self.nvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            log.info("No NVML event set (%s): XIDs are not reported", exc)
            return
        for gpu in gpus:
            try:
                self.nvml.nvmlDeviceRegisterEvents(
                    gpu.handle, pynvml.nvmlEventTypeXidCriticalError, self._events
                )
            except pynvml.NVMLError as exc:
                log.info("GPU %s: no XID events (%s)", gpu.uuid, exc)

    def _drain_xids(self) -> None:
        if self._events is None:
            return
        for _ in range(_MAX_EVENTS_PER_POLL):
            try:
                event = self.nvml.nvmlEventSetWait(self._events, 0)
                if event.eventType & pynvml.nvmlEventTypeXidCriticalError:
                    uuid = self.nvml.nvmlDeviceGetUUID(event.device)
                    self._pending_xids[uuid] = int(event.eventData)
            except pynvml.NVMLError_Timeout:
                return  # queue empty
            except pynvml.NVMLError as exc:
                log.warning("Reading NVML events failed: %s", exc)
                return
