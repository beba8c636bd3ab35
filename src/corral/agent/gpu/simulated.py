"""SimulatedGpuBackend: GPUs from a spec such as `sim:8xH100-80GB`: deterministic IDs and topology,
vital stats driven by the load of the jobs on each GPU, and injectable faults."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
import uuid as uuidlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from corral.core.gpuspec import SimGpuSpec, parse_sim_spec
from corral.core.resources import GpuInfo
from corral.core.simfault import SimFault
from corral.core.telemetry import GpuEvent, GpuEventKind, GpuReadout, GpuSample

_UUID_NS = uuidlib.UUID("0f4c3d1e-8a2b-4e6f-9c7d-2b1a0e3f5d6c")
# SXM parts sold in 8-GPU baseboards: NVLink between all GPUs (through NVSwitch from A100 on).
_SXM_MODELS = ("H100", "H200", "A100", "B200", "V100")
_CONSUMER_PREFIXES = ("RTX", "GTX")
# Bus ids of the eight GPUs in a DGX H100, so simulated GPUs look like the hardware they stand for.
_DGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def gpu_bus_id(position: int) -> str:
    """A plausible NVML bus id for the GPU at `position` (DGX H100 numbering, a new domain per eight)."""
    domain, slot = divmod(position, len(_DGX_BUSES))
    return f"{domain:08X}:{_DGX_BUSES[slot]:02X}:00.0"


def compute_sim_nvlink_peers(model: str, count: int) -> list[tuple[int, ...]]:
    """NVLink peers per GPU: 8-GPU SXM boards are all-to-all, except V100 (DGX-1 hybrid cube-mesh:
    each quad fully linked, plus GPU i <-> i+4). Anything else is PCIe only."""
    name = model.upper()
    if count != 8 or not any(m in name for m in _SXM_MODELS):
        return [() for _ in range(count)]
    if "V100" in name:
        return [tuple(sorted({j for j in range(8) if j // 4 == i // 4 and j != i} | {(i + 4) % 8})) for i in range(8)]
    return [tuple(j for j in range(count) if j != i) for i in range(count)]


def compute_sim_gpus(spec: SimGpuSpec, node_name: str) -> list[GpuInfo]:
    """The GPUs a simulated node has: same spec and node name, same GPUs (pure)."""
    peers = compute_sim_nvlink_peers(spec.model, spec.count)
    ecc = not spec.model.upper().startswith(_CONSUMER_PREFIXES)
    return [
        GpuInfo(
            index=i,
            uuid=f"GPU-sim-{uuidlib.uuid5(_UUID_NS, f'{node_name}/{i}')}",
            model=spec.model,
            memory_mib=spec.memory_mib,
            pci_bus_id=gpu_bus_id(i),
            # Two sockets from four GPUs up, GPUs split evenly between them, as in 2-socket servers.
            numa_node=1 if spec.count >= 4 and i >= spec.count // 2 else 0,
            nvlink_peers=peers[i],
            pcie_switch=f"pcie{i - i % 2}",
            ecc_enabled=ecc,
        )
        for i in range(spec.count)
    ]


@dataclass(frozen=True, slots=True)
class SimModelSpec:
    """Board power limit and top clocks a simulated model reports."""

    power_limit_w: float
    sm_clock_max_mhz: int
    memory_clock_mhz: int


_MODEL_SPECS = {
    "B200": SimModelSpec(1000.0, 1965, 3996),
    "H200": SimModelSpec(700.0, 1980, 3201),
    "H100": SimModelSpec(700.0, 1980, 2619),
    "A100": SimModelSpec(400.0, 1410, 1593),
    "V100": SimModelSpec(300.0, 1530, 877),
    "L40S": SimModelSpec(350.0, 2520, 9001),
    "L4": SimModelSpec(72.0, 2040, 6251),
    "A10": SimModelSpec(150.0, 1695, 6251),
    "T4": SimModelSpec(70.0, 1590, 5001),
    "RTX4090": SimModelSpec(450.0, 2520, 10501),
}
_DEFAULT_MODEL_SPEC = SimModelSpec(300.0, 1800, 5001)
_IDLE_SM_CLOCK_MHZ = 345
_AMBIENT_C = 30.0
_GPU_IDLE_THROTTLE = 0x1


def select_sim_model_spec(model: str) -> SimModelSpec:
    base = model.upper().split("-")[0]
    return _MODEL_SPECS.get(base, _DEFAULT_MODEL_SPEC)


def compute_sim_sample(
    gpu: GpuInfo,
    load: float,
    now: float,
    *,
    ecc_dbe_total: int = 0,
    nvlink_kib: int = 0,
    temperature_c: float | None = None,
) -> GpuSample:
    """The vitals of a simulated GPU at `load` (0..1) at `now` (pure: same inputs, same sample).

    Utilisation follows the load with a little noise seeded from the GPU and the second; power,
    temperature, clocks, memory and PCIe traffic follow utilisation as they do on real boards.
    """
    spec = select_sim_model_spec(gpu.model)
    load = min(max(load, 0.0), 1.0)
    noise = random.Random(f"{gpu.uuid}/{int(now)}").uniform(-1.0, 1.0)
    util = 0.0 if load == 0 else min(max(100.0 * load + 3.0 * noise, 1.0), 100.0)
    busy = util / 100.0
    return GpuSample(
        ts=now,
        index=gpu.index,
        uuid=gpu.uuid,
        utilization_percent=round(util, 1),
        memory_utilization_percent=round(0.6 * util, 1),
        memory_used_mib=int(gpu.memory_mib * (0.85 * min(load * 4, 1.0))) + (512 if load else 0),
        memory_total_mib=gpu.memory_mib,
        power_w=round(spec.power_limit_w * (0.1 + 0.85 * busy), 1),
        temperature_c=temperature_c if temperature_c is not None else round(_AMBIENT_C + 45.0 * busy + noise, 1),
        sm_clock_mhz=spec.sm_clock_max_mhz if load else _IDLE_SM_CLOCK_MHZ,
        memory_clock_mhz=spec.memory_clock_mhz,
        throttle_reasons=0 if load else _GPU_IDLE_THROTTLE,
        ecc_sbe_total=0 if gpu.ecc_enabled else None,
        ecc_dbe_total=ecc_dbe_total if gpu.ecc_enabled else None,
        retired_pages=0 if gpu.ecc_enabled else None,
        remapped_rows_correctable=0 if gpu.ecc_enabled else None,
        remapped_rows_uncorrectable=0 if gpu.ecc_enabled else None,
        pcie_rx_kib_s=round(2_000_000 * busy * 0.2, 1),
        pcie_tx_kib_s=round(2_000_000 * busy * 0.1, 1),
        nvlink_rx_kib=nvlink_kib if gpu.nvlink_peers else None,
        nvlink_tx_kib=nvlink_kib if gpu.nvlink_peers else None,
    )


def compute_fault_events(gpu_index: int, fault: SimFault, now: float) -> list[GpuEvent]:
    """The events a GPU with `fault` reports in one pass (pure)."""
    events: list[GpuEvent] = []
    if fault.off_bus:
        events.append(GpuEvent(now, GpuEventKind.OFF_BUS, gpu_index, "simulated: GPU has fallen off the bus"))
    if fault.xid is not None:
        events.append(GpuEvent(now, GpuEventKind.XID, gpu_index, f"simulated Xid {fault.xid}", xid=fault.xid))
    if fault.ecc:
        events.append(GpuEvent(now, GpuEventKind.ECC_DBE, gpu_index, "simulated double-bit ECC error"))
    return events


LoadSource = Callable[[], Mapping[int, float]]


class SimulatedGpuBackend:
    """Pretends to have the GPUs of `spec`. Raises ValidationError (field "gpus") on a bad spec.

    Load per GPU index (0..1; absent = idle) comes from `load` (called on every sample) or set_load().
    Faults come from inject_fault()/clear_faults(); `clock` stamps events raised by injection.
    """

    name = "simulated"

    def __init__(
        self, spec: str, node_name: str, *, load: LoadSource | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._gpus = compute_sim_gpus(parse_sim_spec(spec), node_name)
        self._load_source = load
        self._loads: dict[int, float] = {}
        self._faults: dict[int, SimFault] = {}
        self._ecc_dbe: dict[int, int] = {}
        self._nvlink_kib: dict[int, int] = {}
        self._last_sample_ts: float | None = None
        self._clock = clock
        self._pending: deque[GpuEvent] = deque(maxlen=1000)
        self._cond = threading.Condition()

    def discover(self) -> list[GpuInfo]:
        with self._cond:
            return [
                dataclasses.replace(g, healthy=False) if self._faults.get(g.index, SimFault()).off_bus else g
                for g in self._gpus
            ]

    def set_load(self, loads: Mapping[int, float] | Iterable[int]) -> None:
        """Which GPUs are busy: {index: load 0..1}, or an iterable of fully busy indices."""
        with self._cond:
            self._loads = dict(loads) if isinstance(loads, Mapping) else {i: 1.0 for i in loads}

    def inject_fault(self, index: int, fault: SimFault) -> None:
        """Add `fault` to GPU `index` (merged with faults already there). Its events are delivered to
        wait_events() at once and repeated by every sample() until clear_faults(). Raises IndexError."""
        if not any(g.index == index for g in self._gpus):
            raise IndexError(f"no simulated GPU {index}")
        with self._cond:
            merged = self._faults.get(index, SimFault()).merge(fault)
            self._faults[index] = merged
            self._pending.extend(compute_fault_events(index, fault, self._clock()))
            if fault.ecc:
                self._ecc_dbe[index] = self._ecc_dbe.get(index, 0) + 1
            self._cond.notify_all()

    def clear_faults(self, index: int | None = None) -> None:
        """Remove the faults of GPU `index`, or of every GPU. ECC counters keep their counts."""
        with self._cond:
            if index is None:
                self._faults.clear()
            else:
                self._faults.pop(index, None)

    def faults(self) -> dict[int, SimFault]:
        with self._cond:
            return dict(self._faults)

    def sample(self, now: float) -> GpuReadout:
        loads = dict(self._load_source()) if self._load_source is not None else None
        with self._cond:
            loads = loads if loads is not None else self._loads
            elapsed = 0.0 if self._last_sample_ts is None else max(now - self._last_sample_ts, 0.0)
            self._last_sample_ts = now
            samples: list[GpuSample] = []
            events: list[GpuEvent] = []
            for gpu in self._gpus:
                fault = self._faults.get(gpu.index)
                if fault is not None:
                    events.extend(compute_fault_events(gpu.index, fault, now))
                    if fault.ecc:
                        self._ecc_dbe[gpu.index] = self._ecc_dbe.get(gpu.index, 0) + 1
                    if fault.off_bus:
                        continue
                load = loads.get(gpu.index, 0.0)
                # NVLink traffic grows with load: about 100 GiB/s at full load on the simulated fabric.
                traffic_kib = int(100 * 1024 * 1024 * load * elapsed)
                self._nvlink_kib[gpu.index] = self._nvlink_kib.get(gpu.index, 0) + traffic_kib
                samples.append(
                    compute_sim_sample(
                        gpu,
                        load,
                        now,
                        ecc_dbe_total=self._ecc_dbe.get(gpu.index, 0),
                        nvlink_kib=self._nvlink_kib[gpu.index],
                        temperature_c=fault.temperature_c if fault is not None else None,
                    )
                )
            return GpuReadout(tuple(samples), tuple(events))

    def wait_events(self, timeout_s: float) -> list[GpuEvent]:
        with self._cond:
            if not self._pending:
                self._cond.wait(max(timeout_s, 0.0))
            events = list(self._pending)
            self._pending.clear()
            return events

    def close(self) -> None:
        with self._cond:
            self._cond.notify_all()  # wake a watcher so it can notice it should stop
