"""SimulatedGpuBackend: GPUs from a spec such as `sim:8xH100-80GB`, with deterministic IDs and topology."""

from __future__ import annotations

import uuid as uuidlib

from corral.core.gpuspec import SimGpuSpec, parse_sim_spec
from corral.core.resources import GpuInfo

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
        return [tuple(sorted({j for j in range(8) if j // 4 == i // 4 and j != i} | {(i + 4) % 8}))
                for i in range(8)]
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


class SimulatedGpuBackend:
    """Pretends to have the GPUs of `spec`. Raises ValidationError (field "gpus") on a bad spec."""

    name = "simulated"

    def __init__(self, spec: str, node_name: str) -> None:
        self._gpus = compute_sim_gpus(parse_sim_spec(spec), node_name)

    def discover(self) -> list[GpuInfo]:
        return list(self._gpus)

    def close(self) -> None:
        pass  # nothing held
