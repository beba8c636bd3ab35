"""Schedule one request against a snapshot (pure): a throwaway `Cluster` (cluster.py, the one placement
engine) over the given node states decides; kept for callers holding a list of NodeStates."""

from __future__ import annotations

import random
from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState, Placement
from corral.scheduler.choices import Unschedulable, compute_gpu_choices, make_placement, score_choices
from corral.scheduler.cluster import Cluster
from corral.scheduler.framework import DEFAULT_CONTEXT, Explanation, PlacementPolicy, ScoreContext
from corral.scheduler.plugins import DEFAULT_POLICY, get_policy


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
    return compute_cluster(nodes, policy, rng, ctx).find(request)


def compute_cluster(
    nodes: Sequence[NodeState],
    policy: PlacementPolicy | str = DEFAULT_POLICY,
    rng: random.Random | None = None,
    ctx: ScoreContext = DEFAULT_CONTEXT,
) -> Cluster:
    """The engine over a snapshot with `compute_placement`'s tie rule: the earliest node, unless the
    policy is randomized (then `rng`, or a Random(0), draws among the feasible nodes)."""
    scorer = get_policy(policy) if isinstance(policy, str) else policy
    randomized = bool(getattr(scorer, "randomized", False))
    return Cluster.from_states(nodes, scorer, ctx, (rng or random.Random(0)) if randomized else None)


def explain(request: ResourceRequest, nodes: Sequence[NodeState]) -> Explanation:
    """Why `request` does not fit: the reason each node rejects it, counted (fitting nodes are skipped)."""
    return compute_cluster(nodes).explain(request)


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


__all__ = [
    "Unschedulable",
    "apply_placement",
    "compute_cluster",
    "compute_gpu_choices",
    "compute_placement",
    "explain",
    "make_placement",
    "score_choices",
]
