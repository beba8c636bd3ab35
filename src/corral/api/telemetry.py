"""The telemetry batch an agent POSTs to /api/v1/agents/{node}/telemetry: a typed, bounded wire schema.

It reads exactly what corral.core.telemetry.batch_to_dict writes (the agent's JSON is unchanged) and turns it into
the core's TelemetryBatch. Numbers are JSON numbers (no strings, no booleans, nothing infinite); integer fields take
a float too and keep its whole part, as the server always did. Unknown keys are ignored, so a newer agent may send
more. A bad field is refused with the API's usual 422 naming it (`gpus.0.ts`).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

from corral.api import bounds
from corral.core.telemetry import GpuEvent, GpuEventKind, GpuProcess, GpuSample, HostSample, TelemetryBatch

MAX_BATCH_GPUS = 64  # GPU samples in one batch
MAX_BATCH_EVENTS = 1000  # the agent's event buffer holds no more between two batches
MAX_GPU_PROCESSES = 1024
MAX_EVENT_DETAIL_CHARS = 1000  # a longer detail is cut, not refused (a driver message may be long)
MAX_NAME_CHARS = 255  # a node name or a GPU UUID
MAX_TS = 1e11  # Unix seconds: year 5138; a wrong unit (milliseconds) is refused rather than stored
MAX_FLOAT = 1e18  # far beyond any reading (bytes/s, watts, percent), far below overflow
MAX_GPU_INDEX = bounds.MAX_GPUS_PER_NODE
# Counters (bytes, errors, events): the largest integer a JSON double (and so the OpenAPI document) holds exactly,
# 8 PiB; far below the database's 64 bits.
MAX_COUNT = 2**53 - 1


def _whole(value: Any) -> Any:
    """A finite JSON number as an int (a float keeps its whole part); anything else is left to refuse."""
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return value


def _cut_detail(value: Any) -> Any:
    return value[:MAX_EVENT_DETAIL_CHARS] if isinstance(value, str) else value


# Strict: "12" and true are not numbers. A float field takes an int; an int field takes a float (whole part).
Float = Annotated[float, Strict(), Field(allow_inf_nan=False, ge=-MAX_FLOAT, le=MAX_FLOAT)]
Ts = Annotated[float, Strict(), Field(allow_inf_nan=False, ge=0, le=MAX_TS)]
Count = Annotated[int, Strict(), Field(ge=0, le=MAX_COUNT), BeforeValidator(_whole)]
GpuIndex = Annotated[int, Strict(), Field(ge=0, le=MAX_GPU_INDEX), BeforeValidator(_whole)]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class HostSampleIn(_Wire):
    """The node's host vitals; byte counters are cumulative since boot."""

    ts: Ts
    cpu_percent: Float
    cpu_count: Count
    load_1m: Float
    load_5m: Float
    load_15m: Float
    memory_used_mib: Count
    memory_total_mib: Count
    disk_used_bytes: Count
    disk_total_bytes: Count
    disk_read_bytes: Count
    disk_write_bytes: Count
    net_rx_bytes: Count
    net_tx_bytes: Count

    def to_core(self) -> HostSample:
        return HostSample(**self.model_dump())


class GpuProcessIn(_Wire):
    pid: Count
    used_memory_mib: Count | None = None

    def to_core(self) -> GpuProcess:
        return GpuProcess(self.pid, self.used_memory_mib)


class GpuSampleIn(_Wire):
    """One GPU's vitals; null (or absent) = the device or driver does not report that value."""

    ts: Ts
    index: GpuIndex
    uuid: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    utilization_percent: Float | None = None
    memory_utilization_percent: Float | None = None
    memory_used_mib: Count | None = None
    memory_total_mib: Count | None = None
    power_w: Float | None = None
    temperature_c: Float | None = None
    sm_clock_mhz: Count | None = None
    memory_clock_mhz: Count | None = None
    throttle_reasons: Count = 0
    ecc_sbe_total: Count | None = None
    ecc_dbe_total: Count | None = None
    retired_pages: Count | None = None
    remapped_rows_correctable: Count | None = None
    remapped_rows_uncorrectable: Count | None = None
    remap_pending: bool = False
    pcie_rx_kib_s: Float | None = None
    pcie_tx_kib_s: Float | None = None
    nvlink_rx_kib: Count | None = None
    nvlink_tx_kib: Count | None = None
    processes: list[GpuProcessIn] = Field(default_factory=list, max_length=MAX_GPU_PROCESSES)

    def to_core(self) -> GpuSample:
        values = self.model_dump(exclude={"processes"})
        return GpuSample(**values, processes=tuple(p.to_core() for p in self.processes))


class GpuEventIn(_Wire):
    """A GPU failure; `gpu_index` null: the GPU could not be told (e.g. NVML itself failed)."""

    ts: Ts
    kind: GpuEventKind
    gpu_index: GpuIndex | None = None
    detail: Annotated[str, BeforeValidator(_cut_detail)] = ""
    xid: Count | None = None

    def to_core(self) -> GpuEvent:
        return GpuEvent(self.ts, self.kind, self.gpu_index, self.detail, self.xid)


class TelemetryBatchIn(_Wire):
    """What the agent sends per interval (corral.core.telemetry.batch_to_dict of a TelemetryBatch)."""

    node: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    ts: Ts
    host: HostSampleIn | None = None
    gpus: list[GpuSampleIn] = Field(default_factory=list, max_length=MAX_BATCH_GPUS)
    events: list[GpuEventIn] = Field(default_factory=list, max_length=MAX_BATCH_EVENTS)
    gpu_count: Count = 0  # GPUs the agent discovered now
    dropped_events: Count = 0  # events lost to the agent's bounded buffer

    def to_core(self) -> TelemetryBatch:
        return TelemetryBatch(
            node=self.node,
            ts=self.ts,
            host=self.host.to_core() if self.host else None,
            gpus=tuple(g.to_core() for g in self.gpus),
            events=tuple(e.to_core() for e in self.events),
            gpu_count=self.gpu_count,
            dropped_events=self.dropped_events,
        )
