"""Choose which GPUs of a node a request gets: highest bandwidth between them (pure).

Order of preference: one NVLink island, then one PCIe switch, then one NUMA node, then anything.
Within the chosen group, GPUs already shared are preferred for fractional requests (packing), so a
fresh GPU is opened only when no shared one has room.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from functools import lru_cache

from corral.core.resources import FULL_GPU_MILLI, GpuInfo, NodeInfo, NodeState


@lru_cache(maxsize=4096)
def nvlink_islands(info: NodeInfo) -> tuple[int, ...]:
    """Island id per GPU position (connected components of the NVLink graph; a lone GPU is its own)."""
    gpus: Sequence[GpuInfo] = info.gpus
    by_index = {g.index: pos for pos, g in enumerate(gpus)}
    parent = list(range(len(gpus)))

    def root(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    for pos, g in enumerate(gpus):
        for peer in g.nvlink_peers:
            if peer in by_index:
                a, b = root(pos), root(by_index[peer])
                if a != b:
                    parent[a] = b
    return tuple(root(p) for p in range(len(gpus)))


@lru_cache(maxsize=4096)
def has_topology(info: NodeInfo) -> bool:
    """True when GPUs of this node differ in interconnect or kind, so *which* GPUs matters."""
    if not info.gpus:
        return False
    first = info.gpus[0]
    return any(
        g.nvlink_peers
        or g.pcie_switch is not None
        or g.numa_node is not None
        or (g.model, g.memory_mib, g.healthy, g.ecc_enabled, g.mig_profile)
        != (first.model, first.memory_mib, first.healthy, first.ecc_enabled, first.mig_profile)
        for g in info.gpus
    )


def _best_group(positions: list[int], count: int, key: Callable[[int], Hashable]) -> list[int] | None:
    """The smallest group (by `key`) holding `count` positions: best fit keeps big groups whole."""
    groups: dict[Hashable, list[int]] = {}
    for p in positions:
        groups.setdefault(key(p), []).append(p)
    fitting = [g for g in groups.values() if len(g) >= count]
    if not fitting:
        return None
    best = min(fitting, key=lambda g: (len(g), g[0]))
    return best[:count]


def select_island(node: NodeState, positions: list[int], count: int) -> list[int] | None:
    """`count` positions inside one NVLink island (smallest island that holds them), or None."""
    islands = nvlink_islands(node.info)
    return _best_group(positions, count, lambda p: islands[p])


def select_gpus(node: NodeState, positions: list[int], count: int, gpu_milli: int) -> list[int]:
    """Pick `count` of the available `positions` with the best interconnect; returns positions."""
    if count <= 0:
        return []
    gpus = node.info.gpus
    if count == 1:
        # A share packs onto the fullest GPU that still has room; a whole GPU takes the first free one.
        if gpu_milli < FULL_GPU_MILLI:
            return [max(positions, key=lambda p: (node.gpu_used_milli[p], -p))]
        return [positions[0]]
    islands = nvlink_islands(node.info)
    for key in (
        lambda p: ("nv", islands[p]) if gpus[p].nvlink_peers else ("solo", p),
        lambda p: gpus[p].pcie_switch if gpus[p].pcie_switch is not None else ("sw", p),
        lambda p: gpus[p].numa_node if gpus[p].numa_node is not None else ("numa", p),
    ):
        chosen = _best_group(positions, count, key)
        if chosen is not None:
            return chosen
    return positions[:count]


def candidate_gpu_sets(node: NodeState, positions: list[int], count: int, gpu_milli: int) -> list[tuple[int, ...]]:
    """Distinct GPU choices worth scoring: the topology choice first, then (for a share) one GPU per
    distinct load level, since GPUs of equal load and kind are interchangeable for every policy."""
    first = tuple(select_gpus(node, positions, count, gpu_milli))
    if count != 1 or gpu_milli >= FULL_GPU_MILLI:
        return [first]
    seen = {(node.info.gpus[first[0]].model, node.gpu_used_milli[first[0]])}
    out = [first]
    for p in positions:
        key = (node.info.gpus[p].model, node.gpu_used_milli[p])
        if key not in seen:
            seen.add(key)
            out.append((p,))
    return out


def select_cpu_numa_node(info: NodeInfo, positions: Sequence[int]) -> int | None:
    """The NUMA node the job's CPUs should come from: the one all its GPUs sit on, if they share one."""
    numa = {info.gpus[p].numa_node for p in positions}
    if len(numa) == 1:
        (node,) = numa
        return node
    return None
