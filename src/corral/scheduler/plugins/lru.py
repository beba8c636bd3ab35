"""`lru`: the node placed on least recently (never-used nodes first), spreading wear and heat.

Source: the seed appliance portal's "least recently used appliance" option; Slurm's `LLN`-style
rotation. Node ages come from `ScoreContext.last_used` (logical ticks, no clock).
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext


class LeastRecentlyUsed:
    name = "lru"
    gpu_aware = False
    per_node = True  # scores depend on the node's name, not only its hardware and load (no class sharing)

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        tick = ctx.last_used.get(node.info.name)
        return 100.0 if tick is None else 100.0 / (2.0 + tick)
