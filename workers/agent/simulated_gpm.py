"""GPM (GPU Performance Metrics) of the simulated NVML: SM activity and its kin, as counters.

The real GPM samples are opaque buffers whose difference over time gives each metric; here the
buffers are real ctypes memory behind pynvml's `c_nvmlGpmSample_t`, and each keeps the GPU's
activity integrals at the moment it was taken, so the reader's code path is the driver's.
`SimulatedGpm` is mixed into `SimulatedNvml`, which provides the devices, the clock and faults.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import pynvml

if TYPE_CHECKING:
    from workers.agent.simulated import SimHandle, _FakeGpu

# Without an explicit SM activity (set_load), a loaded GPU's SMs are this busy per % of
# utilization, and occupancy, tensor activity and DRAM bandwidth follow SM activity so.
SM_PER_UTIL = 0.85
GPM_SHARES = {"sm_occupancy": 0.55, "tensor_active": 0.7, "dram_bw_util": 0.45}
GPM_ORDER = ("sm_active", *GPM_SHARES)
_GPM_METRIC_NAMES = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_active",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active",
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_bw_util",
}


class SimulatedGpm:
    """The nvmlGpm* calls of `SimulatedNvml` (needs its `_enter`, `_device`, `_physical_only`,
    `_handle_of`, `_target_util`, `gpm`, `gpm_samples` and `clock`)."""

    def _gpm_rates(self, gpu: _FakeGpu, now: float) -> list[float]:
        if gpu.migs and gpu.load is None:  # the board: its instances on average
            rates = [self._gpm_rates(m, now) for m in gpu.migs]
            return [sum(column) / len(rates) for column in zip(*rates, strict=True)]
        sm = gpu.sm_load
        if sm is None:
            sm = SM_PER_UTIL * self._target_util(gpu, now)
        sm = min(max(sm, 0.0), 100.0)
        return [sm, *(sm * share for share in GPM_SHARES.values())]

    def _accrue_gpm(self, gpu: _FakeGpu, now: float) -> None:
        """GPM counters are integrals of activity over time, like the real ones."""
        if gpu.gpm_tick is not None and now > gpu.gpm_tick:
            elapsed = now - gpu.gpm_tick
            rates = self._gpm_rates(gpu, now)
            gpu.gpm_totals = [t + r * elapsed for t, r in zip(gpu.gpm_totals, rates, strict=True)]
        if gpu.gpm_tick is None or now > gpu.gpm_tick:
            gpu.gpm_tick = now

    # GPM: sample buffers are real ctypes memory behind pynvml's c_nvmlGpmSample_t, so the
    # reader fills pynvml's own c_nvmlGpmMetricsGet_t for the fake exactly as for the driver.

    def nvmlGpmQueryDeviceSupport(self, handle: SimHandle) -> Any:
        gpu = self._enter("nvmlGpmQueryDeviceSupport", handle)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(self.gpm and gpu.parent is None)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        buffer = ctypes.create_string_buffer(64)
        self.gpm_samples[ctypes.addressof(buffer)] = (buffer, None)
        return ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        if self.gpm_samples.pop(_address(gpmSample), None) is None:
            raise pynvml.NVMLError_InvalidArgument()

    def nvmlGpmSampleGet(self, device: SimHandle, gpmSample: Any) -> Any:
        gpu = self._enter("nvmlGpmSampleGet", device)
        if not self.gpm:
            raise pynvml.NVMLError_NotSupported()
        if gpu.parent is not None:
            raise pynvml.NVMLError_InvalidArgument()  # MIG: nvmlGpmMigSampleGet on the parent
        return self._gpm_sample(gpu, gpmSample)

    def nvmlGpmMigSampleGet(self, device: SimHandle, gpuInstanceId: int, gpmSample: Any) -> Any:
        gpu = self._physical_only("nvmlGpmMigSampleGet", device)
        if not self.gpm:
            raise pynvml.NVMLError_NotSupported()
        mig = next((m for m in gpu.migs if m.index == gpuInstanceId), None)
        if mig is None:
            raise pynvml.NVMLError_NotFound()
        return self._gpm_sample(mig, gpmSample)

    def _gpm_sample(self, gpu: _FakeGpu, gpmSample: Any) -> Any:
        address = _address(gpmSample)
        if address not in self.gpm_samples:
            raise pynvml.NVMLError_InvalidArgument()  # never allocated, or freed
        now = self.clock()
        self._accrue_gpm(gpu, now)
        buffer, _ = self.gpm_samples[address]
        self.gpm_samples[address] = (buffer, (gpu.uuid, now, tuple(gpu.gpm_totals)))
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError_ArgumentVersionMismatch()
        first = self.gpm_samples.get(_address(metricsGet.sample1), (None, None))[1]
        second = self.gpm_samples.get(_address(metricsGet.sample2), (None, None))[1]
        if first is None or second is None or first[0] != second[0] or second[1] < first[1]:
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self._device("nvmlGpmMetricsGet", self._handle_of(first[0]))  # faults, lost GPUs
        elapsed = second[1] - first[1]
        rates = (
            [(b - a) / elapsed for a, b in zip(first[2], second[2], strict=True)]
            if elapsed > 0
            else self._gpm_rates(gpu, second[1])
        )
        for slot in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[slot]
            name = _GPM_METRIC_NAMES.get(metric.metricId)
            if name is None:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            metric.nvmlReturn = pynvml.NVML_SUCCESS
            metric.value = rates[GPM_ORDER.index(name)]
        return metricsGet


def _address(gpm_sample: Any) -> int | None:
    """The address behind a c_nvmlGpmSample_t (None for a null pointer)."""
    return ctypes.cast(gpm_sample, ctypes.c_void_p).value
