"""The placement engine's computed node classes (Nomad's idea): hardware that is interchangeable, and
classes of nodes with the same hardware and the same load, whose verdicts are memoised."""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.core.resources import NodeInfo, NodeState
from corral.scheduler.framework import Status


@dataclass(slots=True)
class NodeHardware:
    """A computed node class: nodes that are interchangeable when equally loaded."""

    hw_id: int
    info: NodeInfo  # the first node's info stands for all
    symmetric: bool  # GPUs interchangeable: load tuples are kept sorted
    gpu_models: tuple[str, ...]
    # `filters.check_hardware` per request number: (SUCCESS or why never, eligible GPU positions).
    fits: dict[int, tuple[Status, tuple[int, ...]]] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class NodeClass:
    key: tuple[object, ...]
    hw: NodeHardware
    state: NodeState
    bucket: tuple[int, int]  # (fully free GPUs, largest free share on a used GPU // 100)
    indexed: bool  # schedulable classes only are in the index (the others are kept for explanations)
    members: dict[int, None] = field(default_factory=dict)
    ranked: list[tuple[int, int]] = field(default_factory=list)  # heap of (rank, node); stale entries skipped
    # Keyed by the request's interned number (hashing a request dataclass per class is the hot spot).
    verdicts: dict[int, tuple[float, tuple[int, ...]] | None] = field(default_factory=dict)
    rejections: dict[int, str] = field(default_factory=dict)


def compute_hardware_key(info: NodeInfo) -> tuple[object, ...]:
    """What makes two nodes interchangeable when equally loaded (everything but the name)."""
    gpus = tuple(
        (g.model, g.memory_mib, g.healthy, g.numa_node, g.pcie_switch, g.nvlink_peers, g.ecc_enabled, g.mig_profile)
        for g in info.gpus
    )
    return (gpus, info.cpu_milli, info.memory_mib, info.labels, info.taints, info.runtimes)
