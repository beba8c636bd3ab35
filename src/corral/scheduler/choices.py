"""What the placement engine decides with on one node: GPU choices, their best score, the Placement (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeInfo, NodeState, Placement
from corral.scheduler.filters import available_positions
from corral.scheduler.framework import Explanation, PlacementPolicy, ScoreContext
from corral.scheduler.topology import candidate_gpu_sets, select_cpu_numa_node, select_island


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """The request fits nowhere now; `explanation` says why per node, `resolvable` whether waiting helps."""

    explanation: Explanation

    @property
    def resolvable(self) -> bool:
        return self.explanation.resolvable

    @property
    def reason(self) -> str:
        return self.explanation.summary()


def compute_gpu_choices(
    node: NodeState, request: ResourceRequest, gpu_aware: bool, eligible: Sequence[int] | None = None
) -> list[tuple[int, ...]]:
    """The GPU position sets a policy chooses among on a feasible node (topology choice first; `eligible`:
    the positions `filters.check_hardware` found, when the caller keeps them)."""
    if request.gpus == 0:
        return [()]
    available = available_positions(node, request, eligible)
    if request.nvlink and request.gpus > 1:
        island = select_island(node, available, request.gpus)
        if island is not None:
            return [tuple(island)]
    choices = candidate_gpu_sets(node, available, request.gpus, request.gpu_milli)
    return choices if gpu_aware else choices[:1]


def score_choices(
    node: NodeState,
    request: ResourceRequest,
    scorer: PlacementPolicy,
    ctx: ScoreContext,
    eligible: Sequence[int] | None = None,
) -> tuple[float, tuple[int, ...]]:
    """Best (score, positions) on one feasible node; earlier choices win ties."""
    best: tuple[float, tuple[int, ...]] | None = None
    for positions in compute_gpu_choices(node, request, scorer.gpu_aware, eligible):
        score = scorer.score_node(node, request, positions, ctx)
        if best is None or score > best[0]:
            best = (score, positions)
    assert best is not None
    return best


def make_placement(info: NodeInfo, request: ResourceRequest, positions: Sequence[int]) -> Placement:
    """The placement of `request` on GPU `positions` of the node; CPUs come from the GPUs' NUMA node
    (`extra["cpu_numa_node"]`) when they share one."""
    numa = select_cpu_numa_node(info, positions)
    return Placement(
        node=info.name,
        gpu_indices=tuple(info.gpus[p].index for p in positions),
        gpu_milli=request.gpu_milli,
        cpu_milli=request.cpu_milli,
        memory_mib=request.memory_mib,
        extra={"cpu_numa_node": str(numa)} if numa is not None else {},
    )
