"""Reading vital stats and fault events through NVML (nvidia-ml-py) for NvmlGpuBackend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from corral.agent.gpu.base import GpuBackendError
from corral.core.telemetry import GpuEvent, GpuEventKind, GpuProcess, GpuSample

_MIB = 1024 * 1024
_T = TypeVar("_T")
_ALL_LINKS = 0xFFFFFFFF  # field-value scope id meaning "summed over every NVLink"
NvmlModule = Any


class GpuLostError(Exception):
    """A call about one GPU answered GPU_IS_LOST: the GPU fell off the bus."""


class PcieCounters:
    """PCIe throughput from NVML's cumulative byte counters, as a rate between two sampling passes.

    `nvmlDeviceGetPcieThroughput` samples the bus for 20 ms per direction before it answers: measured on an
    H200 (driver 580) it took 21 ms per call, 42 of the 42.4 ms one sampling pass cost per GPU (340 ms a pass
    on an 8-GPU node). The two counters come in one `nvmlDeviceGetFieldValues` call (0.3 ms). The first pass
    of a GPU has nothing to compare with and reports no rate; a counter that went backwards (driver reload)
    starts over. Drivers or nvidia-ml-py versions without the counters fall back to the slow call.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int, int]] = {}  # uuid -> (when, tx bytes, rx bytes)

    def read(self, nv: NvmlModule, handle: Any, uuid: str, now: float) -> tuple[float | None, float | None]:
        """(tx KiB/s, rx KiB/s) of one GPU; None where unknown. NVMLError propagates (the caller sorts it)."""
        counters = self._counters(nv, handle)
        if counters is None:
            return (
                float(nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_TX_BYTES)),
                float(nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_RX_BYTES)),
            )
        tx, rx = counters
        previous = self._last.get(uuid)
        self._last[uuid] = (now, tx, rx)
        if previous is None or now <= previous[0] or tx < previous[1] or rx < previous[2]:
            return None, None
        seconds = now - previous[0]
        return (tx - previous[1]) / 1024 / seconds, (rx - previous[2]) / 1024 / seconds

    @staticmethod
    def _counters(nv: NvmlModule, handle: Any) -> tuple[int, int] | None:
        tx_id = getattr(nv, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", None)  # absent from old nvidia-ml-py
        rx_id = getattr(nv, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", None)
        if tx_id is None or rx_id is None:
            return None
        values = nv.nvmlDeviceGetFieldValues(handle, [tx_id, rx_id])
        if any(int(v.nvmlReturn) != nv.NVML_SUCCESS for v in values):
            return None
        return int(values[0].value.ullVal), int(values[1].value.ullVal)


def read_gpu_sample(
    nv: NvmlModule, handle: Any, index: int, uuid: str, now: float, pcie: PcieCounters | None = None
) -> GpuSample:
    """Every vital stat of one GPU. NOT_SUPPORTED and other per-call errors leave a value None;
    GPU_IS_LOST on any call raises GpuLostError (the GPU is gone, not just missing a counter).
    `pcie` keeps the byte counters between passes (see PcieCounters); without it each pass reads a fresh one."""

    def opt(read: Callable[[], _T]) -> _T | None:
        try:
            return read()
        except nv.NVMLError as e:
            if getattr(e, "value", None) == nv.NVML_ERROR_GPU_IS_LOST:
                raise GpuLostError(str(e)) from e
            return None

    util = opt(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
    memory = opt(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
    power_mw = opt(lambda: int(nv.nvmlDeviceGetPowerUsage(handle)))
    remapped = opt(lambda: tuple(nv.nvmlDeviceGetRemappedRows(handle)))
    nvlink = opt(lambda: _read_nvlink_kib(nv, handle))
    processes = opt(lambda: _read_processes(nv, handle))
    pcie_kib_s = opt(lambda: (pcie or PcieCounters()).read(nv, handle, uuid, now)) or (None, None)
    return GpuSample(
        ts=now,
        index=index,
        uuid=uuid,
        utilization_percent=float(util.gpu) if util is not None else None,
        memory_utilization_percent=float(util.memory) if util is not None else None,
        memory_used_mib=int(memory.used) // _MIB if memory is not None else None,
        memory_total_mib=int(memory.total) // _MIB if memory is not None else None,
        power_w=power_mw / 1000.0 if power_mw is not None else None,
        temperature_c=opt(lambda: float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))),
        sm_clock_mhz=opt(lambda: int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))),
        memory_clock_mhz=opt(lambda: int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM))),
        throttle_reasons=opt(lambda: int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))) or 0,
        ecc_sbe_total=opt(lambda: _ecc(nv, handle, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED)),
        ecc_dbe_total=opt(lambda: _ecc(nv, handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)),
        retired_pages=opt(lambda: _retired_pages(nv, handle)),
        remapped_rows_correctable=int(remapped[0]) if remapped is not None else None,
        remapped_rows_uncorrectable=int(remapped[1]) if remapped is not None else None,
        remap_pending=bool(remapped[2]) if remapped is not None else False,
        pcie_tx_kib_s=pcie_kib_s[0],
        pcie_rx_kib_s=pcie_kib_s[1],
        nvlink_tx_kib=nvlink[0] if nvlink is not None else None,
        nvlink_rx_kib=nvlink[1] if nvlink is not None else None,
        processes=processes or (),
    )


def _ecc(nv: NvmlModule, handle: Any, error_type: int) -> int:
    return int(nv.nvmlDeviceGetTotalEccErrors(handle, error_type, nv.NVML_VOLATILE_ECC))


def _retired_pages(nv: NvmlModule, handle: Any) -> int:
    """Pages retired for either cause (pre-Ampere; Ampere and later remap rows instead)."""
    causes = (
        nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    )
    return sum(len(nv.nvmlDeviceGetRetiredPages(handle, cause)) for cause in causes)


def _read_nvlink_kib(nv: NvmlModule, handle: Any) -> tuple[int, int] | None:
    """Cumulative NVLink (tx, rx) KiB over all links; None where the GPU has no NVLink counters."""
    ids = [
        (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, _ALL_LINKS),
        (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, _ALL_LINKS),
    ]
    values = nv.nvmlDeviceGetFieldValues(handle, ids)
    if any(int(v.nvmlReturn) != 0 for v in values):
        return None
    return int(values[0].value.ullVal), int(values[1].value.ullVal)


def _read_processes(nv: NvmlModule, handle: Any) -> tuple[GpuProcess, ...]:
    return tuple(
        GpuProcess(pid=int(p.pid), used_memory_mib=None if p.usedGpuMemory is None else int(p.usedGpuMemory) // _MIB)
        for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)
    )


def compute_failure_event(nv: NvmlModule, index: int, error: BaseException, now: float) -> GpuEvent:
    """The event for a GPU that could not be read: off_bus when it is lost, nvml_error otherwise."""
    lost = isinstance(error, GpuLostError) or getattr(error, "value", None) == nv.NVML_ERROR_GPU_IS_LOST
    if lost:
        return GpuEvent(now, GpuEventKind.OFF_BUS, index, f"GPU {index} has fallen off the bus: {error}")
    return GpuEvent(now, GpuEventKind.NVML_ERROR, index, f"NVML could not read GPU {index}: {error}")


class NvmlEventWatcher:
    """One NVML event set registered for Xid and double-bit ECC events on every GPU.

    Created lazily by the first wait(); GPUs that cannot register (NOT_SUPPORTED, e.g. in some
    containers) are skipped and reported once as nvml_error events.
    """

    def __init__(self, nv: NvmlModule, clock: Callable[[], float]) -> None:
        self._nv = nv
        self._clock = clock
        self._set: Any = None
        self._startup_events: list[GpuEvent] = []

    @property
    def watched_mask(self) -> int:
        return int(self._nv.nvmlEventTypeXidCriticalError | self._nv.nvmlEventTypeDoubleBitEccError)

    def open(self) -> None:
        nv = self._nv
        try:
            self._set = nv.nvmlEventSetCreate()
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as e:
            raise GpuBackendError(f"NVML event watching is not available: {e}") from e
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                mask = int(nv.nvmlDeviceGetSupportedEventTypes(handle)) & self.watched_mask
                if mask:
                    nv.nvmlDeviceRegisterEvents(handle, mask, self._set)
            except nv.NVMLError as e:
                if getattr(e, "value", None) != nv.NVML_ERROR_NOT_SUPPORTED:
                    self._startup_events.append(compute_failure_event(nv, index, e, self._clock()))

    def wait(self, timeout_s: float) -> list[GpuEvent]:
        """Block up to timeout_s for the first event, then drain what else is queued without blocking."""
        nv = self._nv
        if self._set is None:
            self.open()
        events, self._startup_events = self._startup_events, []
        timeout_ms = 0 if events else max(int(timeout_s * 1000), 0)
        while True:
            try:
                data = nv.nvmlEventSetWait(self._set, timeout_ms)
            except nv.NVMLError as e:
                code = getattr(e, "value", None)
                if code == nv.NVML_ERROR_TIMEOUT:
                    return events
                if code == nv.NVML_ERROR_GPU_IS_LOST:
                    return events + self._reopen_without_lost_gpus()
                raise GpuBackendError(f"NVML event wait failed: {e}") from e
            events.append(self._to_event(data))
            timeout_ms = 0

    def _reopen_without_lost_gpus(self) -> list[GpuEvent]:
        """A registered GPU fell off the bus and the set now fails every wait: build a new set; the
        lost GPU cannot register again and is reported as off_bus by open()."""
        self.close()
        self.open()
        events, self._startup_events = self._startup_events, []
        if not events:
            events.append(GpuEvent(self._clock(), GpuEventKind.OFF_BUS, None, "a GPU has fallen off the bus"))
        return events

    def close(self) -> None:
        if self._set is not None:
            try:
                self._nv.nvmlEventSetFree(self._set)
            except self._nv.NVMLError:
                pass  # the library is going away anyway
            self._set = None

    def _to_event(self, data: Any) -> GpuEvent:
        nv = self._nv
        try:
            index: int | None = int(nv.nvmlDeviceGetIndex(data.device))
        except nv.NVMLError:
            index = None
        now = self._clock()
        if int(data.eventType) & nv.nvmlEventTypeDoubleBitEccError:
            return GpuEvent(now, GpuEventKind.ECC_DBE, index, "double-bit ECC error")
        xid = int(data.eventData)
        return GpuEvent(now, GpuEventKind.XID, index, f"Xid {xid}", xid=xid)
