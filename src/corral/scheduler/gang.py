"""Multi-node requests (N nodes x G GPUs): all members placed at once on distinct nodes, or none (pure).
The engine is `Cluster.place_gang`; this is the entry point for callers holding a list of NodeStates."""

from __future__ import annotations

import random
from collections.abc import Sequence

from corral.core.errors import ValidationError
from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState, Placement
from corral.scheduler.cluster import REASON_GANG_SHORT
from corral.scheduler.cycle import Unschedulable, compute_cluster
from corral.scheduler.framework import DEFAULT_CONTEXT, PlacementPolicy, ScoreContext
from corral.scheduler.plugins import DEFAULT_POLICY


def compute_gang_placement(
    request: ResourceRequest,
    node_count: int,
    nodes: Sequence[NodeState],
    policy: PlacementPolicy | str = DEFAULT_POLICY,
    rng: random.Random | None = None,
    ctx: ScoreContext = DEFAULT_CONTEXT,
) -> list[Placement] | Unschedulable:
    """Place `node_count` copies of `request` (one per node) greedily by the policy; all or nothing.
    The explanation of a failure counts every node's reason."""
    if node_count < 1:
        raise ValidationError("nodes", f"must be >= 1, got {node_count}")
    return compute_cluster(nodes, policy, rng, ctx).place_gang(request, node_count)


__all__ = ["REASON_GANG_SHORT", "compute_gang_placement"]
