"""Devices and nodes as the scheduler sees them: frozen, slotted, comparable values."""

from __future__ import annotations

from dataclasses import dataclass, field

FULL_GPU_MILLI = 1000


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU (or MIG instance) on a node, as discovered by a GPU backend."""

    index: int
    uuid: str
    model: str
    memory_mib: int
    pci_bus_id: str = ""
    numa_node: int | None = None
    nvlink_peers: tuple[int, ...] = ()
    pcie_switch: str | None = None
    ecc_enabled: bool = False
    healthy: bool = True
    # Set when this device is a MIG instance (e.g. "1g.10gb"); "" for a whole GPU (added for issue 3).
    mig_profile: str = ""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A machine in the pool: its GPUs and host resources."""

    name: str
    gpus: tuple[GpuInfo, ...] = ()
    cpu_milli: int = 0
    memory_mib: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[str, ...] = ()
    runtimes: tuple[str, ...] = ("process",)  # how its agent runs jobs: "process", and "docker" with an engine
    # Container images cached on the node (refs as jobs name them): placement prefers, among equal choices, a
    # node that has a job's image. Not hardware: node classes ignore it (scheduler/node_class.py).
    images: frozenset[str] = frozenset()

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node plus what is in use on it right now: the scheduler's view of one node in a snapshot.

    `gpu_used_milli[i]` is how much of GPU position i (in `info.gpus` order) is allocated, 0..1000.
    """

    info: NodeInfo
    gpu_used_milli: tuple[int, ...] = ()
    cpu_used_milli: int = 0
    memory_used_mib: int = 0
    schedulable: bool = True

    def __post_init__(self) -> None:
        if not self.gpu_used_milli:
            object.__setattr__(self, "gpu_used_milli", tuple(0 for _ in self.info.gpus))
        if len(self.gpu_used_milli) != len(self.info.gpus):
            raise ValueError("gpu_used_milli must have one entry per GPU")

    def free_gpu_positions(self) -> list[int]:
        """Positions of healthy GPUs with nothing allocated on them."""
        return [i for i, (g, used) in enumerate(zip(self.info.gpus, self.gpu_used_milli)) if g.healthy and used == 0]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a request goes: a node and the GPU indices (device indices, not positions) it gets."""

    node: str
    gpu_indices: tuple[int, ...]
    gpu_milli: int = FULL_GPU_MILLI
    cpu_milli: int = 0
    memory_mib: int = 0
    extra: dict[str, str] = field(default_factory=dict, compare=False)
