"""FakeNvml: the subset of pynvml the agent calls (discovery, metrics, events) over fake GPUs, raising
pynvml's real NVMLError classes."""

from __future__ import annotations

import threading
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type information

from corral.agent.gpu.simulated import gpu_bus_id

_MIB = 1024 * 1024
_V = TypeVar("_V")
_UUID_NS = uuidlib.UUID("5b0c6e2a-3f1d-4c7e-9a51-0d6c1f2e8b47")
_LINKS_PER_GPU = 18  # NVLink 4 (H100): 18 links per GPU


@dataclass
class FakeGpu:
    """One fake device. `numa_node=None`: NVML answers NOT_SUPPORTED (the backend falls back to sysfs)."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = ""
    memory_mib: int = 81559
    pci_bus_id: str = "00000000:18:00.0"
    numa_node: int | None = 0
    ecc_enabled: bool = True
    nvlinks: dict[int, str] = field(default_factory=dict)  # link number -> remote PCI bus id
    pcie_switch: int | None = None  # GPUs with the same number sit under one PCIe switch
    lost: bool = False  # every call about this GPU raises NVMLError_GpuIsLost
    failing_calls: dict[str, int] = field(default_factory=dict)  # NVML function name -> error code
    # Vital stats. None: NVML answers NOT_SUPPORTED for that call.
    utilization: tuple[int, int] = (0, 0)  # (gpu %, memory-controller %)
    memory_used_mib: int = 512
    power_mw: int | None = 70_000
    temperature_c: int = 31
    sm_clock_mhz: int = 345
    memory_clock_mhz: int = 2619
    throttle_reasons: int = 0x1  # idle
    ecc_counts: tuple[int, int] = (0, 0)  # volatile (corrected, uncorrected)
    retired_pages: tuple[int, int] | None = None  # (multiple single-bit, double-bit); None: Ampere+
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # (corr, unc, pending, failed)
    pcie_kib_s: tuple[int, int] = (0, 0)  # (tx, rx) as nvmlDeviceGetPcieThroughput answers
    pcie_bytes: tuple[int, int] | None = (0, 0)  # cumulative (tx, rx) byte counters; None: driver lacks them
    memory_affinity: int | None = None  # NUMA node of nvmlDeviceGetMemoryAffinity; None: NOT_SUPPORTED
    nvlink_kib: tuple[int, int] | None = None  # cumulative (tx, rx); None: no NVLink counters
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes)
    event_types: int = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError


@dataclass(frozen=True)
class FakeHandle:
    index: int


@dataclass
class FakeMemory:
    total: int
    free: int
    used: int


@dataclass
class FakeUtilization:
    gpu: int
    memory: int


@dataclass
class FakeProcess:
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - pynvml's field name


@dataclass
class FakeFieldValue:
    fieldId: int  # noqa: N815
    scopeId: int  # noqa: N815
    nvmlReturn: int  # noqa: N815
    value: Any


@dataclass
class FakeValue:
    ullVal: int  # noqa: N815


@dataclass
class FakeEventData:
    device: FakeHandle
    eventType: int  # noqa: N815
    eventData: int  # noqa: N815
    gpuInstanceId: int = 0xFFFFFFFF  # noqa: N815
    computeInstanceId: int = 0xFFFFFFFF  # noqa: N815


@dataclass
class FakeEventSet:
    registered: dict[int, int] = field(default_factory=dict)  # GPU index -> event type mask
    queue: list[FakeEventData] = field(default_factory=list)
    freed: bool = False


@dataclass
class FakePciInfo:
    busId: str | bytes  # noqa: N815 - pynvml's field name
    busIdLegacy: str | bytes  # noqa: N815


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml maps the code to its subclass, e.g. NVMLError_NotSupported


class FakeNvml:
    """Module-like stand-in for pynvml. Tests build it with `dgx()` / `pcie_box()` or from FakeGpu values.

    `init_error` (an NVML_ERROR_* code) makes nvmlInit fail, e.g. NVML_ERROR_LIBRARY_NOT_FOUND.
    `bytes_strings` returns bytes for names, UUIDs and bus ids like pynvml < 11 did.
    """

    NVMLError = pynvml.NVMLError
    NVML_ERROR_GPU_IS_LOST: int = pynvml.NVML_ERROR_GPU_IS_LOST
    NVML_NVLINK_MAX_LINKS: int = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_FEATURE_ENABLED: int = pynvml.NVML_FEATURE_ENABLED
    NVML_FEATURE_DISABLED: int = pynvml.NVML_FEATURE_DISABLED
    NVML_NVLINK_DEVICE_TYPE_GPU: int = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
    NVML_NVLINK_DEVICE_TYPE_SWITCH: int = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    NVML_NVLINK_DEVICE_TYPE_IBMNPU: int = pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU
    NVML_TOPOLOGY_INTERNAL: int = pynvml.NVML_TOPOLOGY_INTERNAL
    NVML_TOPOLOGY_SINGLE: int = pynvml.NVML_TOPOLOGY_SINGLE
    NVML_TOPOLOGY_MULTIPLE: int = pynvml.NVML_TOPOLOGY_MULTIPLE
    NVML_TOPOLOGY_HOSTBRIDGE: int = pynvml.NVML_TOPOLOGY_HOSTBRIDGE
    NVML_TOPOLOGY_NODE: int = pynvml.NVML_TOPOLOGY_NODE
    NVML_TOPOLOGY_SYSTEM: int = pynvml.NVML_TOPOLOGY_SYSTEM
    NVML_ERROR_TIMEOUT: int = pynvml.NVML_ERROR_TIMEOUT
    NVML_ERROR_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_TEMPERATURE_GPU: int = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM: int = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM: int = pynvml.NVML_CLOCK_MEM
    NVML_MEMORY_ERROR_TYPE_CORRECTED: int = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC: int = pynvml.NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC: int = pynvml.NVML_AGGREGATE_ECC
    NVML_PCIE_UTIL_TX_BYTES: int = pynvml.NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES: int = pynvml.NVML_PCIE_UTIL_RX_BYTES
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: int = (
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    )
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: int = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: int = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: int = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    NVML_FI_DEV_PCIE_COUNT_TX_BYTES: int = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES
    NVML_FI_DEV_PCIE_COUNT_RX_BYTES: int = pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
    NVML_SUCCESS: int = pynvml.NVML_SUCCESS
    NVML_AFFINITY_SCOPE_NODE: int = pynvml.NVML_AFFINITY_SCOPE_NODE
    nvmlEventTypeXidCriticalError: int = pynvml.nvmlEventTypeXidCriticalError  # noqa: N815
    nvmlEventTypeDoubleBitEccError: int = pynvml.nvmlEventTypeDoubleBitEccError  # noqa: N815

    def __init__(
        self, gpus: list[FakeGpu] | None = None, *, init_error: int | None = None, bytes_strings: bool = False
    ) -> None:
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.bytes_strings = bytes_strings
        self.init_refs = 0  # NVML counts nvmlInit/nvmlShutdown pairs
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._events = threading.Condition(self._lock)
        self.event_sets: list[FakeEventSet] = []
        for i, gpu in enumerate(self.gpus):
            if not gpu.uuid:
                gpu.uuid = f"GPU-{uuidlib.uuid5(_UUID_NS, f'{gpu.pci_bus_id}/{i}')}"

    # ----- builders -----
    @classmethod
    def dgx(
        cls,
        count: int = 8,
        model: str = "NVIDIA H100 80GB HBM3",
        *,
        nvlink: Literal["all", "direct", "none"] = "all",
        memory_mib: int = 81559,
    ) -> FakeNvml:
        """An SXM box: two NUMA nodes, GPU pairs per PCIe switch. NVLink "all" runs through four
        NVSwitches (as on DGX H100: remote PCI info names the switch), "direct" links every pair of GPUs
        point to point, "none" has no NVLink."""
        buses = [gpu_bus_id(i) for i in range(count)]
        gpus = [
            FakeGpu(
                name=model,
                memory_mib=memory_mib,
                pci_bus_id=buses[i],
                numa_node=_half(i, count),
                ecc_enabled=True,
                pcie_switch=i // 2,
            )
            for i in range(count)
        ]
        if nvlink == "all":
            switches = [f"00000000:{0x05 + k:02X}:00.0" for k in range(4)]
            for gpu in gpus:
                gpu.nvlinks = {link: switches[link % 4] for link in range(_LINKS_PER_GPU)}
        elif nvlink == "direct":
            for i, gpu in enumerate(gpus):
                gpu.nvlinks = {link: buses[j] for link, j in enumerate(j for j in range(count) if j != i)}
        for gpu in gpus:
            gpu.nvlink_kib = (0, 0) if gpu.nvlinks else None
        return cls(gpus)

    @classmethod
    def pcie_box(
        cls, count: int = 4, model: str = "NVIDIA L40S", *, numa_nodes: int = 2, memory_mib: int = 46068
    ) -> FakeNvml:
        """A PCIe server: no NVLink, GPUs spread evenly over `numa_nodes`, pairs under one switch."""
        gpus = [
            FakeGpu(
                name=model,
                memory_mib=memory_mib,
                pci_bus_id=gpu_bus_id(i),
                numa_node=i * numa_nodes // max(count, 1),
                ecc_enabled=False,
                pcie_switch=i // 2,
            )
            for i in range(count)
        ]
        return cls(gpus)

    def lose(self, index: int) -> None:
        """Make a GPU fall off the bus: every later call about it raises NVMLError_GpuIsLost."""
        self.gpus[index].lost = True

    def fail(self, index: int, call: str, code: int = pynvml.NVML_ERROR_UNKNOWN) -> None:
        """Make one NVML function fail for one GPU with the given NVML_ERROR_* code."""
        self.gpus[index].failing_calls[call] = code

    def busy(self, index: int, util: int = 97, *, temperature_c: int = 71, power_mw: int = 640_000) -> None:
        """Make a GPU look busy with one process on it."""
        gpu = self.gpus[index]
        gpu.utilization = (util, util // 2)
        gpu.memory_used_mib = gpu.memory_mib * 3 // 4
        gpu.temperature_c, gpu.power_mw = temperature_c, power_mw
        gpu.sm_clock_mhz, gpu.throttle_reasons = 1980, 0
        gpu.pcie_kib_s = (300_000, 600_000)
        gpu.processes = [(4242 + index, gpu.memory_used_mib * _MIB)]

    def emit_xid(self, index: int, xid: int) -> None:
        """The driver reports Xid `xid` on GPU `index` to every event set that registered for it."""
        self._emit(index, pynvml.nvmlEventTypeXidCriticalError, xid)

    def emit_ecc_dbe(self, index: int) -> None:
        self.gpus[index].ecc_counts = (self.gpus[index].ecc_counts[0], self.gpus[index].ecc_counts[1] + 1)
        self._emit(index, pynvml.nvmlEventTypeDoubleBitEccError, 0)

    def _emit(self, index: int, event_type: int, data: int) -> None:
        with self._events:
            for event_set in self.event_sets:
                if event_set.registered.get(index, 0) & event_type and not event_set.freed:
                    event_set.queue.append(FakeEventData(FakeHandle(index), event_type, data))
            self._events.notify_all()

    # ----- library -----
    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise _error(self.init_error)
        with self._lock:
            self.init_refs += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        with self._lock:
            if self.init_refs == 0:
                raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
            self.init_refs -= 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._require_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:  # noqa: N802
        self._require_init()
        if not 0 <= index < len(self.gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._gpu(FakeHandle(index), "nvmlDeviceGetHandleByIndex")
        return FakeHandle(index)

    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:  # noqa: N802
        self._gpu(handle, "nvmlDeviceGetIndex")
        return handle.index

    # ----- events -----
    def nvmlEventSetCreate(self) -> FakeEventSet:  # noqa: N802
        self._require_init()
        self.calls["nvmlEventSetCreate"] += 1
        with self._lock:
            event_set = FakeEventSet()
            self.event_sets.append(event_set)
            return event_set

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:  # noqa: N802
        with self._lock:
            event_set.freed = True

    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetSupportedEventTypes").event_types

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, types: int, event_set: FakeEventSet) -> None:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
        if types & ~gpu.event_types:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            event_set.registered[handle.index] = event_set.registered.get(handle.index, 0) | types

    def nvmlEventSetWait(self, event_set: FakeEventSet, timeout_ms: int) -> FakeEventData:  # noqa: N802
        """One event, oldest first; NVMLError_Timeout when none came within `timeout_ms`."""
        self._require_init()
        self.calls["nvmlEventSetWait"] += 1
        with self._events:
            if not event_set.queue and timeout_ms > 0:
                self._events.wait(timeout_ms / 1000)
            if event_set.freed:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            lost = [i for i in event_set.registered if self.gpus[i].lost]
            if lost and not event_set.queue:
                raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
            if not event_set.queue:
                raise _error(pynvml.NVML_ERROR_TIMEOUT)
            return event_set.queue.pop(0)

    # ----- per device -----
    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str | bytes:  # noqa: N802
        return self._text(self._gpu(handle, "nvmlDeviceGetUUID").uuid)

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str | bytes:  # noqa: N802
        return self._text(self._gpu(handle, "nvmlDeviceGetName").name)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> FakeMemory:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        total, used = gpu.memory_mib * _MIB, gpu.memory_used_mib * _MIB
        return FakeMemory(total=total, free=total - used, used=used)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:  # noqa: N802
        gpu, mem = self._gpu(handle, "nvmlDeviceGetUtilizationRates").utilization
        return FakeUtilization(gpu=gpu, memory=mem)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._supported(self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock: int) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        clocks = {pynvml.NVML_CLOCK_SM: gpu.sm_clock_mhz, pynvml.NVML_CLOCK_MEM: gpu.memory_clock_mhz}
        if clock not in clocks:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return clocks[clock]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").throttle_reasons

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter: int) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        if not gpu.ecc_enabled:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if counter not in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.ecc_counts[1 if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0]

    def nvmlDeviceGetRetiredPages(self, handle: FakeHandle, cause: int) -> list[int]:  # noqa: N802
        pages = self._supported(self._gpu(handle, "nvmlDeviceGetRetiredPages").retired_pages)
        return [0x1000 * (n + 1) for n in range(pages[cause])]

    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:  # noqa: N802
        return self._supported(self._gpu(handle, "nvmlDeviceGetRemappedRows").remapped_rows)

    def nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:  # noqa: N802
        tx, rx = self._gpu(handle, "nvmlDeviceGetPcieThroughput").pcie_kib_s
        return tx if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else rx

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: list[Any]) -> list[FakeFieldValue]:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues")
        out = []
        for wanted in field_ids:
            field_id, scope = wanted if isinstance(wanted, tuple) else (wanted, 0)
            counters = {
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: (gpu.nvlink_kib, 0),
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: (gpu.nvlink_kib, 1),
                pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: (gpu.pcie_bytes, 0),
                pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: (gpu.pcie_bytes, 1),
            }
            source, which = counters.get(field_id, (None, 0))
            if source is None:
                out.append(FakeFieldValue(field_id, scope, pynvml.NVML_ERROR_NOT_SUPPORTED, FakeValue(0)))
            else:
                out.append(FakeFieldValue(field_id, scope, pynvml.NVML_SUCCESS, FakeValue(source[which])))
        return out

    def nvmlDeviceGetMemoryAffinity(self, handle: FakeHandle, node_set_size: int, scope: int) -> list[int]:  # noqa: N802
        node = self._supported(self._gpu(handle, "nvmlDeviceGetMemoryAffinity").memory_affinity)
        words = [0] * node_set_size
        words[node // 64] |= 1 << (node % 64)
        return words

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[FakeProcess]:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [FakeProcess(pid, used) for pid, used in gpu.processes]

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:  # noqa: N802
        return self._pci(self._gpu(handle, "nvmlDeviceGetPciInfo").pci_bus_id)

    def nvmlDeviceGetNumaNodeId(self, handle: FakeHandle) -> int:  # noqa: N802
        node = self._gpu(handle, "nvmlDeviceGetNumaNodeId").numa_node
        if node is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return node

    def nvmlDeviceGetEccMode(self, handle: FakeHandle) -> list[int]:  # noqa: N802
        on = self._gpu(handle, "nvmlDeviceGetEccMode").ecc_enabled
        mode = pynvml.NVML_FEATURE_ENABLED if on else self.NVML_FEATURE_DISABLED
        return [mode, mode]

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetNvLinkState")
        if not gpu.nvlinks:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)  # what PCIe cards answer
        if not 0 <= link < _LINKS_PER_GPU:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.NVML_FEATURE_ENABLED if link in gpu.nvlinks else self.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeHandle, link: int) -> FakePciInfo:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetNvLinkRemotePciInfo")
        if link not in gpu.nvlinks:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._pci(gpu.nvlinks[link])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeHandle, link: int) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetNvLinkRemoteDeviceType")
        if link not in gpu.nvlinks:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        is_gpu = any(g.pci_bus_id == gpu.nvlinks[link] for g in self.gpus)
        return self.NVML_NVLINK_DEVICE_TYPE_GPU if is_gpu else self.NVML_NVLINK_DEVICE_TYPE_SWITCH

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: FakeHandle, h2: FakeHandle) -> int:  # noqa: N802
        a = self._gpu(h1, "nvmlDeviceGetTopologyCommonAncestor")
        b = self._gpu(h2, "nvmlDeviceGetTopologyCommonAncestor")
        if h1.index == h2.index:
            return self.NVML_TOPOLOGY_INTERNAL
        if a.pcie_switch is not None and a.pcie_switch == b.pcie_switch:
            return self.NVML_TOPOLOGY_SINGLE
        if a.numa_node == b.numa_node:
            return self.NVML_TOPOLOGY_NODE
        return self.NVML_TOPOLOGY_SYSTEM

    # ----- internals -----
    def _require_init(self) -> None:
        if self.init_refs == 0:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: FakeHandle, call: str) -> FakeGpu:
        self._require_init()
        self.calls[call] += 1
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if call in gpu.failing_calls:
            raise _error(gpu.failing_calls[call])
        return gpu

    def _supported(self, value: _V | None) -> _V:
        if value is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _text(self, value: str) -> str | bytes:
        return value.encode() if self.bytes_strings else value

    def _pci(self, bus_id: str) -> FakePciInfo:
        legacy = bus_id[-12:]  # the old 13-byte field held 0000:18:00.0
        return FakePciInfo(busId=self._text(bus_id), busIdLegacy=self._text(legacy))


def _half(i: int, count: int) -> int:
    return 0 if count < 4 or i < count // 2 else 1
