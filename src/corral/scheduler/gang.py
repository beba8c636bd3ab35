"""Multi-node requests (N nodes x G GPUs): all members placed at once on distinct nodes, or none (pure)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from corral.core.errors import ValidationError
from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState, Placement
from corral.scheduler.cycle import Unschedulable, apply_placement, compute_placement
from corral.scheduler.framework import DEFAULT_CONTEXT, Explanation, PlacementPolicy, ScoreContext
from corral.scheduler.plugins import DEFAULT_POLICY, get_policy

REASON_GANG_SHORT = "fewer nodes fit than the multi-node request needs"


def compute_gang_placement(
    request: ResourceRequest,
    node_count: int,
    nodes: Sequence[NodeState],
    policy: PlacementPolicy | str = DEFAULT_POLICY,
    rng: random.Random | None = None,
    ctx: ScoreContext = DEFAULT_CONTEXT,
) -> list[Placement] | Unschedulable:
    """Place `node_count` copies of `request` (one per node) greedily by the policy, on a scratch copy
    of the snapshot; all or nothing. The explanation of a failure counts every node's reason."""
    if node_count < 1:
        raise ValidationError("nodes", f"must be >= 1, got {node_count}")
    scorer = get_policy(policy) if isinstance(policy, str) else policy
    scratch = list(nodes)
    taken: set[str] = set()
    placements: list[Placement] = []
    for _ in range(node_count):
        free = [n for n in scratch if n.info.name not in taken]
        result = compute_placement(request, free, scorer, rng, ctx)
        if isinstance(result, Unschedulable):
            explanation = Explanation()
            for reason, n in result.explanation.reasons.items():
                explanation.add(reason, n)
            explanation.add(REASON_GANG_SHORT, node_count - len(placements))
            return Unschedulable(explanation)
        placements.append(result)
        taken.add(result.node)
        apply_placement(scratch, result)
    return placements
