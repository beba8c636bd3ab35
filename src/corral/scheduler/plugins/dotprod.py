"""`dotprod`: the node whose free-resource vector best aligns with the request (GPU, CPU, memory,
each normalised by the node's capacity).

Source: DotProd as defined in Weng et al., ATC'23, after Tetris (Grandl et al., SIGCOMM'14).
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext
from corral.scheduler.plugins.measures import gpu_capacity_milli, gpu_free_milli


class DotProd:
    name = "dotprod"
    gpu_aware = False

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        info = node.info
        cap = gpu_capacity_milli(node)
        pairs = [
            (request.total_gpu_milli, gpu_free_milli(node), cap),
            (request.cpu_milli, info.cpu_milli - node.cpu_used_milli, info.cpu_milli),
            (request.memory_mib, info.memory_mib - node.memory_used_mib, info.memory_mib),
        ]
        dot = sum((r / c) * (f / c) for r, f, c in pairs if c)
        return 100.0 * dot / 3.0
