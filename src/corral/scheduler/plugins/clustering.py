"""`clustering`: co-locate requests of the same type, so like shares fill a GPU exactly.

Source: Clustering as defined in Weng et al., ATC'23. The snapshot records loads, not job types, so a
GPU whose load is a whole multiple of the share stands for "holds shares of this type", and a node's
count of fully used GPUs stands for "holds whole-GPU jobs".
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import FULL_GPU_MILLI, NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext


class Clustering:
    name = "clustering"
    gpu_aware = True

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        n = len(node.gpu_used_milli) or 1
        if request.gpus and request.gpu_milli < FULL_GPU_MILLI:
            alike = sum(1 for u in node.gpu_used_milli if u and u % request.gpu_milli == 0)
            on_alike = any(
                node.gpu_used_milli[p] and node.gpu_used_milli[p] % request.gpu_milli == 0 for p in positions
            )
            return 100.0 * (2.0 * on_alike + alike / n) / 3.0
        whole = sum(1 for u in node.gpu_used_milli if u == FULL_GPU_MILLI)
        return 100.0 * whole / n
