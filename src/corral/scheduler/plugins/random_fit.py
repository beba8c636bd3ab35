"""`random`: a uniformly random node among those that fit (seeded; same seed, same choice).

Source: Random as defined in Weng et al., ATC'23 (the baseline every policy should beat).
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext


class RandomFit:
    name = "random"
    gpu_aware = False
    # The engine draws among all feasible nodes with the caller's seeded random.Random.
    randomized = True

    def score_node(
        self, node: NodeState, request: ResourceRequest, positions: Sequence[int] = (), ctx: ScoreContext = DEFAULT_CONTEXT
    ) -> float:
        return 0.0
