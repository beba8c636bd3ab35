"""Schedule one request against a snapshot: filter, score, pick devices (pure).

This is the function the server's scheduling loop calls over its few nodes; the simulator and the
benchmark drive the same policies through the indexed `Cluster` (cluster.py).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from corral.core.requests import ResourceRequest
from corral.core.resources import FULL_GPU_MILLI, NodeInfo, NodeState, Placement
from corral.scheduler.filters import available_positions, check_fit
from corral.scheduler.framework import DEFAULT_CONTEXT, Explanation, PlacementPolicy, ScoreContext
from corral.scheduler.plugins import DEFAULT_POLICY, get_policy
from corral.scheduler.topology import candidate_gpu_sets, select_cpu_numa_node, select_island
from corral.scheduler.workload import compute_gpu_supply


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


def compute_gpu_choices(node: NodeState, request: ResourceRequest, gpu_aware: bool) -> list[tuple[int, ...]]:
    """The GPU position sets a policy chooses among on a feasible node (topology choice first)."""
    if request.gpus == 0:
        return [()]
    available = available_positions(node, request)
    if request.nvlink and request.gpus > 1:
        island = select_island(node, available, request.gpus)
        if island is not None:
            return [tuple(island)]
    choices = candidate_gpu_sets(node, available, request.gpus, request.gpu_milli)
    return choices if gpu_aware else choices[:1]


def score_choices(
    node: NodeState, request: ResourceRequest, scorer: PlacementPolicy, ctx: ScoreContext
) -> tuple[float, tuple[int, ...]]:
    """Best (score, positions) on one feasible node; earlier choices win ties."""
    best: tuple[float, tuple[int, ...]] | None = None
    for positions in compute_gpu_choices(node, request, scorer.gpu_aware):
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


def compute_placement(
    request: ResourceRequest,
    nodes: Sequence[NodeState],
    policy: PlacementPolicy | str = DEFAULT_POLICY,
    rng: random.Random | None = None,
    ctx: ScoreContext = DEFAULT_CONTEXT,
) -> Placement | Unschedulable:
    """Choose a node and GPUs for `request`, or say why none fits (reasons counted per node).

    Ties go to the earlier node in `nodes`; `rng` (seeded by the caller) is used only by `random`.
    """
    scorer = get_policy(policy) if isinstance(policy, str) else policy
    if ctx.gpu_supply is None:
        ctx = replace(ctx, gpu_supply=compute_gpu_supply(n.info for n in nodes))
    explanation = Explanation()
    feasible: list[NodeState] = []
    for node in nodes:
        status = check_fit(node, request)
        if status.ok:
            feasible.append(node)
        else:
            explanation.add(status.reason)
    if not feasible:
        return Unschedulable(explanation)
    if getattr(scorer, "randomized", False):
        rng = rng or random.Random(0)
        node = rng.choice(feasible)
        positions = compute_gpu_choices(node, request, False)[0]
        if request.gpus == 1 and request.gpu_milli < FULL_GPU_MILLI:
            positions = (rng.choice(available_positions(node, request)),)
        return make_placement(node.info, request, positions)
    best: tuple[float, NodeState, tuple[int, ...]] | None = None
    for node in feasible:
        score, positions = score_choices(node, request, scorer, ctx)
        if best is None or score > best[0]:
            best = (score, node, positions)
    assert best is not None
    return make_placement(best[1].info, request, best[2])


def explain(request: ResourceRequest, nodes: Sequence[NodeState]) -> Explanation:
    """Why `request` does not fit: the reason each node rejects it, counted (fitting nodes are skipped)."""
    explanation = Explanation()
    for node in nodes:
        status = check_fit(node, request)
        if not status.ok:
            explanation.add(status.reason)
    return explanation


def apply_placement(nodes: list[NodeState], placement: Placement) -> None:
    """Reflect `placement` in the snapshot `nodes` (replaces the node's state in the list)."""
    for i, node in enumerate(nodes):
        if node.info.name != placement.node:
            continue
        used = list(node.gpu_used_milli)
        for pos, g in enumerate(node.info.gpus):
            if g.index in placement.gpu_indices:
                used[pos] += placement.gpu_milli
        nodes[i] = NodeState(
            info=node.info,
            gpu_used_milli=tuple(used),
            cpu_used_milli=node.cpu_used_milli + placement.cpu_milli,
            memory_used_mib=node.memory_used_mib + placement.memory_mib,
            schedulable=node.schedulable,
        )
        return
    raise KeyError(placement.node)
