"""`first-free`: the first node (in snapshot order) that fits.

Source: the seed appliance portal ("posts the job to the 1st free appliance it finds").
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext


class FirstFree:
    name = "first-free"
    gpu_aware = False
    first_wins = True  # ties (all of them) go to the first node, never to the rng

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        return 0.0
