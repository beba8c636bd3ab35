"""Fluent builders for scheduler tests: make_node("a").gpus(8, "H100-80GB").nvlink_islands(4).build()."""

from __future__ import annotations

from dataclasses import replace

from corral.core.resources import GpuInfo, NodeInfo, NodeState


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._gpus: list[GpuInfo] = []
        self._cpu = 64_000
        self._mem = 262_144
        self._labels: tuple[tuple[str, str], ...] = ()
        self._taints: tuple[str, ...] = ()
        self._used: list[int] = []
        self._cpu_used = 0

    def gpus(self, count: int, model: str = "A100-80GB", memory_mib: int = 81920) -> NodeBuilder:
        start = len(self._gpus)
        self._gpus += [GpuInfo(start + i, f"{self._name}-{start + i}", model, memory_mib) for i in range(count)]
        self._used += [0] * count
        return self

    def nvlink_islands(self, size: int) -> NodeBuilder:
        """Fully connect consecutive groups of `size` GPUs."""
        out = []
        for g in self._gpus:
            base = g.index - g.index % size
            peers = tuple(i for i in range(base, base + size) if i != g.index and i < len(self._gpus))
            out.append(replace(g, nvlink_peers=peers))
        self._gpus = out
        return self

    def mig(self, count: int, profile: str = "1g.10gb", model: str = "A100-80GB") -> NodeBuilder:
        """Add `count` MIG instances of `profile` (each a device of its own)."""
        start = len(self._gpus)
        self._gpus += [
            GpuInfo(start + i, f"{self._name}-mig{start + i}", model, 10240, mig_profile=profile) for i in range(count)
        ]
        self._used += [0] * count
        return self

    def ecc(self, *positions: int) -> NodeBuilder:
        """Turn ECC on for the GPUs at `positions` (all when none given)."""
        chosen = set(positions) if positions else set(range(len(self._gpus)))
        self._gpus = [replace(g, ecc_enabled=True) if i in chosen else g for i, g in enumerate(self._gpus)]
        return self

    def numa(self, gpus_per_numa_node: int) -> NodeBuilder:
        """Consecutive groups of GPUs on NUMA nodes 0, 1, ..."""
        self._gpus = [replace(g, numa_node=i // gpus_per_numa_node) for i, g in enumerate(self._gpus)]
        return self

    def host(self, cpu_milli: int, memory_mib: int) -> NodeBuilder:
        self._cpu, self._mem = cpu_milli, memory_mib
        return self

    def labels(self, **labels: str) -> NodeBuilder:
        self._labels = tuple(sorted(labels.items()))
        return self

    def taints(self, *taints: str) -> NodeBuilder:
        self._taints = taints
        return self

    def used(self, *milli: int, cpu_milli: int = 0) -> NodeBuilder:
        self._used = list(milli) + [0] * (len(self._gpus) - len(milli))
        self._cpu_used = cpu_milli
        return self

    def info(self) -> NodeInfo:
        return NodeInfo(self._name, tuple(self._gpus), self._cpu, self._mem, self._labels, self._taints)

    def build(self) -> NodeState:
        return NodeState(self.info(), tuple(self._used), self._cpu_used, 0)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)
