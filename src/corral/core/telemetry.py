"""Telemetry values (pure): host and per-GPU samples, GPU health events, and their wire form."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from corral.core.errors import ValidationError

# Bits of NVML's clocks-throttle-reason mask, in bit order, named as nvidia-smi names them.
THROTTLE_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


class GpuEventKind(StrEnum):
    XID = "xid"  # the driver reported an Xid error (code in `xid`)
    ECC_DBE = "ecc_dbe"  # uncorrectable (double-bit) ECC error
    OFF_BUS = "off_bus"  # the GPU fell off the bus (NVML: GPU_IS_LOST)
    NVML_ERROR = "nvml_error"  # NVML failed reading the GPU for another reason
    TEMPERATURE = "temperature"  # temperature over the threshold (detail names it)
    GPU_MISSING = "gpu_missing"  # fewer GPUs than at registration


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process holding memory on a GPU."""

    pid: int
    used_memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class HostSample:
    """The node's host vitals at `ts` (Unix seconds). Byte counters are cumulative since boot."""

    ts: float
    cpu_percent: float
    cpu_count: int
    load_1m: float
    load_5m: float
    load_15m: float
    memory_used_mib: int
    memory_total_mib: int
    disk_used_bytes: int
    disk_total_bytes: int
    disk_read_bytes: int
    disk_write_bytes: int
    net_rx_bytes: int
    net_tx_bytes: int

    @property
    def memory_used_percent(self) -> float:
        return 100.0 * self.memory_used_mib / self.memory_total_mib if self.memory_total_mib else 0.0

    @property
    def disk_used_percent(self) -> float:
        return 100.0 * self.disk_used_bytes / self.disk_total_bytes if self.disk_total_bytes else 0.0


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's vitals at `ts`. None = the device or driver does not report that value."""

    ts: float
    index: int
    uuid: str
    utilization_percent: float | None = None
    memory_utilization_percent: float | None = None  # memory-controller busy time, not capacity
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    throttle_reasons: int = 0  # NVML bit mask, see THROTTLE_REASON_BITS
    ecc_sbe_total: int | None = None  # volatile (since driver load) corrected errors
    ecc_dbe_total: int | None = None  # volatile uncorrected errors
    retired_pages: int | None = None  # pre-Ampere page retirement (single + double bit)
    remapped_rows_correctable: int | None = None  # Ampere+ row remapping
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool = False
    pcie_rx_kib_s: float | None = None
    pcie_tx_kib_s: float | None = None
    nvlink_rx_kib: int | None = None  # cumulative over all links
    nvlink_tx_kib: int | None = None
    processes: tuple[GpuProcess, ...] = ()

    @property
    def memory_free_mib(self) -> int | None:
        if self.memory_used_mib is None or self.memory_total_mib is None:
            return None
        return max(self.memory_total_mib - self.memory_used_mib, 0)

    @property
    def throttle_reason_names(self) -> tuple[str, ...]:
        return compute_throttle_reason_names(self.throttle_reasons)


@dataclass(frozen=True, slots=True)
class GpuEvent:
    """Something went wrong with a GPU. `gpu_index` None: the GPU could not be told (e.g. NVML itself)."""

    ts: float
    kind: GpuEventKind
    gpu_index: int | None
    detail: str = ""
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class GpuReadout:
    """What one sampling pass over the node's GPUs produced: the GPUs it could read, and the failures."""

    samples: tuple[GpuSample, ...] = ()
    events: tuple[GpuEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class TelemetryBatch:
    """What the agent sends per interval. `dropped_events`: events lost to the bounded buffer."""

    node: str
    ts: float
    host: HostSample | None
    gpus: tuple[GpuSample, ...] = ()
    events: tuple[GpuEvent, ...] = ()
    gpu_count: int = 0  # GPUs discovered now (health compares it with the registration count)
    dropped_events: int = 0
    extra: dict[str, str] = field(default_factory=dict, compare=False)


def compute_throttle_reason_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in THROTTLE_REASON_BITS if mask & bit)


# ----- wire form: plain JSON-able dicts, validated on the way in -----


def batch_to_dict(batch: TelemetryBatch) -> dict[str, Any]:
    """JSON-able form of a batch (what the agent POSTs)."""
    return asdict(batch)


def batch_from_dict(data: Mapping[str, Any], *, max_gpus: int = 64, max_events: int = 1000) -> TelemetryBatch:
    """Parse and bound a batch from an agent. Raises ValidationError(field, problem) on bad input."""
    if not isinstance(data, Mapping):
        raise ValidationError("batch", "expected an object")
    gpus = _list(data, "gpus", max_gpus)
    events = _list(data, "events", max_events)
    host = data.get("host")
    return TelemetryBatch(
        node=_str(data, "node"),
        ts=_num(data, "ts"),
        host=_host_from_dict(host) if host is not None else None,
        gpus=tuple(_gpu_from_dict(g) for g in gpus),
        events=tuple(_event_from_dict(e) for e in events),
        gpu_count=int(_num(data, "gpu_count", 0)),
        dropped_events=int(_num(data, "dropped_events", 0)),
    )


def _host_from_dict(data: Any) -> HostSample:
    if not isinstance(data, Mapping):
        raise ValidationError("host", "expected an object")
    # Built from the dataclass's fields, so the value types are known only at run time: Any.
    values: dict[str, Any] = {f.name: _num(data, f.name) for f in fields(HostSample)}
    ints = {k: int(v) for k, v in values.items() if k not in {"ts", "cpu_percent", "load_1m", "load_5m", "load_15m"}}
    return HostSample(**{**values, **ints})


_GPU_INT_FIELDS = {
    "memory_used_mib",
    "memory_total_mib",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "ecc_sbe_total",
    "ecc_dbe_total",
    "retired_pages",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "nvlink_rx_kib",
    "nvlink_tx_kib",
}
_GPU_FLOAT_FIELDS = {
    "utilization_percent",
    "memory_utilization_percent",
    "power_w",
    "temperature_c",
    "pcie_rx_kib_s",
    "pcie_tx_kib_s",
}


def _gpu_from_dict(data: Any) -> GpuSample:
    if not isinstance(data, Mapping):
        raise ValidationError("gpus", "each GPU sample must be an object")
    optional: dict[str, Any] = {}
    for name in _GPU_INT_FIELDS | _GPU_FLOAT_FIELDS:
        if data.get(name) is not None:
            value = _num(data, name)
            optional[name] = int(value) if name in _GPU_INT_FIELDS else value
    processes = tuple(
        GpuProcess(
            pid=int(_num(p, "pid")),
            used_memory_mib=None if p.get("used_memory_mib") is None else int(_num(p, "used_memory_mib")),
        )
        for p in _list(data, "processes", 1024)
    )
    return GpuSample(
        ts=_num(data, "ts"),
        index=int(_num(data, "index")),
        uuid=_str(data, "uuid"),
        throttle_reasons=int(_num(data, "throttle_reasons", 0)),
        remap_pending=bool(data.get("remap_pending")),
        processes=processes,
        **optional,
    )


def _event_from_dict(data: Any) -> GpuEvent:
    if not isinstance(data, Mapping):
        raise ValidationError("events", "each event must be an object")
    try:
        kind = GpuEventKind(str(data.get("kind")))
    except ValueError as e:
        raise ValidationError("events", f"unknown event kind {data.get('kind')!r}") from e
    index = data.get("gpu_index")
    xid = data.get("xid")
    return GpuEvent(
        ts=_num(data, "ts"),
        kind=kind,
        gpu_index=None if index is None else int(_num(data, "gpu_index")),
        detail=str(data.get("detail", ""))[:1000],
        xid=None if xid is None else int(_num(data, "xid")),
    )


def _list(data: Mapping[str, Any], key: str, limit: int) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ValidationError(key, "expected a list")
    if len(value) > limit:
        raise ValidationError(key, f"{len(value)} entries; at most {limit} allowed")
    return value


def _str(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ValidationError(key, "expected a non-empty string")
    return value


_MISSING = object()


def _num(data: Mapping[str, Any], key: str, default: float | object = _MISSING) -> float:
    value = data.get(key, default) if isinstance(data, Mapping) else _MISSING
    if value is _MISSING:
        raise ValidationError(key, "missing")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(key, f"expected a finite number, got {value!r}")
    return float(value)


# ----- named series: what alert rules, rollups and dashboards refer to -----

GPU_SERIES: dict[str, str] = {
    "gpu_utilization_percent": "GPU busy time over the last sample period, 0..100",
    "gpu_memory_used_mib": "framebuffer memory in use",
    "gpu_memory_used_percent": "framebuffer memory in use, 0..100",
    "gpu_power_w": "board power draw",
    "gpu_temperature_c": "GPU core temperature",
    "gpu_sm_clock_mhz": "SM clock",
    "gpu_memory_clock_mhz": "memory clock",
    "gpu_throttled": "1 when clocks are held down for a reason other than idle",
    "gpu_ecc_sbe_total": "corrected ECC errors since driver load",
    "gpu_ecc_dbe_total": "uncorrected ECC errors since driver load",
    "gpu_retired_pages": "retired memory pages",
    "gpu_remapped_rows_uncorrectable": "rows remapped after uncorrectable errors",
    "gpu_pcie_rx_kib_s": "PCIe receive throughput",
    "gpu_pcie_tx_kib_s": "PCIe transmit throughput",
}
HOST_SERIES: dict[str, str] = {
    "host_cpu_percent": "CPU busy over all cores, 0..100",
    "host_load_1m": "1-minute load average",
    "host_memory_used_percent": "RAM in use, 0..100",
    "host_disk_used_percent": "disk in use on the agent's work volume, 0..100",
}


def _memory_used_percent(sample: GpuSample) -> float | None:
    total, used = sample.memory_total_mib, sample.memory_used_mib
    return 100.0 * used / total if total and used is not None else None


# Each GPU_SERIES metric's value in a sample (None: the GPU does not report it), in GPU_SERIES's order.
GPU_VALUE: dict[str, Callable[[GpuSample], float | int | None]] = {
    "gpu_utilization_percent": lambda s: s.utilization_percent,
    "gpu_memory_used_mib": lambda s: s.memory_used_mib,
    "gpu_memory_used_percent": _memory_used_percent,
    "gpu_power_w": lambda s: s.power_w,
    "gpu_temperature_c": lambda s: s.temperature_c,
    "gpu_sm_clock_mhz": lambda s: s.sm_clock_mhz,
    "gpu_memory_clock_mhz": lambda s: s.memory_clock_mhz,
    "gpu_throttled": lambda s: 1.0 if s.throttle_reasons & ~0x1 else 0.0,
    "gpu_ecc_sbe_total": lambda s: s.ecc_sbe_total,
    "gpu_ecc_dbe_total": lambda s: s.ecc_dbe_total,
    "gpu_retired_pages": lambda s: s.retired_pages,
    "gpu_remapped_rows_uncorrectable": lambda s: s.remapped_rows_uncorrectable,
    "gpu_pcie_rx_kib_s": lambda s: s.pcie_rx_kib_s,
    "gpu_pcie_tx_kib_s": lambda s: s.pcie_tx_kib_s,
}


def compute_gpu_series(sample: GpuSample, metrics: Iterable[str] | None = None) -> dict[str, float]:
    """The GPU_SERIES values one sample carries (absent when the GPU does not report them); `metrics`: only these
    (in their order; None: all, in GPU_SERIES's order)."""
    out: dict[str, float] = {}
    for metric in GPU_VALUE if metrics is None else metrics:
        value = GPU_VALUE[metric](sample)
        if value is not None:
            out[metric] = float(value)
    return out


def compute_host_series(host: HostSample) -> dict[str, float]:
    return {
        "host_cpu_percent": host.cpu_percent,
        "host_load_1m": host.load_1m,
        "host_memory_used_percent": host.memory_used_percent,
        "host_disk_used_percent": host.disk_used_percent,
    }


# ----- per-job GPU usage, kept with the job's history -----


@dataclass(frozen=True, slots=True)
class JobGpuSummary:
    """Running totals over the samples of a job's GPUs (one sample = one GPU at one instant)."""

    samples: int = 0
    utilization_sum: float = 0.0
    utilization_max: float = 0.0
    idle_samples: int = 0  # samples under IDLE_UTILIZATION_PERCENT
    memory_used_max_mib: int = 0
    power_w_sum: float = 0.0
    power_samples: int = 0
    first_ts: float | None = None
    last_ts: float | None = None

    @property
    def utilization_avg(self) -> float | None:
        return self.utilization_sum / self.samples if self.samples else None

    @property
    def power_w_avg(self) -> float | None:
        return self.power_w_sum / self.power_samples if self.power_samples else None

    @property
    def idle_fraction(self) -> float | None:
        return self.idle_samples / self.samples if self.samples else None


IDLE_UTILIZATION_PERCENT = 5.0


def merge_job_gpu_summary(summary: JobGpuSummary, samples: Iterable[GpuSample]) -> JobGpuSummary:
    """The summary with more samples of the job's GPUs folded in (samples without utilisation are skipped)."""
    s = summary
    n, util_sum, util_max, idle = s.samples, s.utilization_sum, s.utilization_max, s.idle_samples
    mem_max, power_sum, power_n = s.memory_used_max_mib, s.power_w_sum, s.power_samples
    first, last = s.first_ts, s.last_ts
    for x in samples:
        if x.utilization_percent is None:
            continue
        n += 1
        util_sum += x.utilization_percent
        util_max = max(util_max, x.utilization_percent)
        idle += x.utilization_percent < IDLE_UTILIZATION_PERCENT
        mem_max = max(mem_max, x.memory_used_mib or 0)
        if x.power_w is not None:
            power_sum, power_n = power_sum + x.power_w, power_n + 1
        first = x.ts if first is None else min(first, x.ts)
        last = x.ts if last is None else max(last, x.ts)
    return JobGpuSummary(n, util_sum, util_max, idle, mem_max, power_sum, power_n, first, last)


# ----- ingest budget: one agent cannot flood the server -----


@dataclass(frozen=True, slots=True)
class IngestBudget:
    """A token bucket per agent: `rate_per_s` samples a second on average, bursts up to `burst`."""

    rate_per_s: float
    burst: float
    tokens: float
    updated_at: float

    @classmethod
    def full(cls, rate_per_s: float, burst: float, now: float) -> IngestBudget:
        return cls(rate_per_s, burst, burst, now)


def compute_ingest(budget: IngestBudget, samples: int, now: float) -> tuple[IngestBudget, bool]:
    """Take `samples` tokens if the bucket holds them (pure). Refused batches take nothing."""
    elapsed = max(now - budget.updated_at, 0.0)
    tokens = min(budget.burst, budget.tokens + elapsed * budget.rate_per_s)
    if samples > tokens:
        return IngestBudget(budget.rate_per_s, budget.burst, tokens, now), False
    return IngestBudget(budget.rate_per_s, budget.burst, tokens - samples, now), True


def compute_batch_size(batch: TelemetryBatch) -> int:
    """What a batch costs against the budget: one per GPU sample, host sample and event."""
    return len(batch.gpus) + len(batch.events) + (1 if batch.host is not None else 0)
