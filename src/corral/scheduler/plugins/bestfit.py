"""`bestfit`: the node with the least weighted free capacity left after placing (best-fit bin packing).

Source: BestFit as defined in Weng et al., ATC'23 (least leftover weighted resources; GPU and CPU
weighted equally), after Panigrahy et al., "Heuristics for vector bin packing" (2011).
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext
from corral.scheduler.plugins.measures import free_after


class BestFit:
    name = "bestfit"
    gpu_aware = False

    def score_node(
        self, node: NodeState, request: ResourceRequest, positions: Sequence[int] = (), ctx: ScoreContext = DEFAULT_CONTEXT
    ) -> float:
        gpu, cpu, _ = free_after(node, request)
        return 100.0 * (1.0 - (gpu + cpu) / 2.0)
