"""`random`: a uniformly random node among those that fit, and for a share a uniformly random GPU
with room on it (seeded; same seed, same choice).

Source: Random as defined in Weng et al., ATC'23 and its artifact (RandomScore with the `random` GPU
selection); the baseline every policy should beat.
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
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        return 0.0
