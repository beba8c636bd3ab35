"""`packing`: prefer a GPU already shared, then a free GPU on a node already in use, then an idle node.

Source: Packing as defined in Weng et al., ATC'23, scored as in its artifact
(hkust-adsl/kubernetes-scheduler-simulator, plugin/gpu_packing_score.go): shared GPUs score 50..100
(less room left is better), free GPUs on a used node 33..50 (fewer opened is better), idle nodes
0..33; integer scores, ties broken at random by the engine. After Gandiva (OSDI'18).
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import FULL_GPU_MILLI, NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext


class Packing:
    name = "packing"
    gpu_aware = False  # the topology allocator already puts a share on the fullest GPU with room

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        if request.gpus == 0:
            return 0.0
        healthy = [u for g, u in zip(node.info.gpus, node.gpu_used_milli) if g.healthy]
        fully_free = sum(1 for u in healthy if u == 0)
        if fully_free == len(healthy):
            return float(max(100 // 3 - fully_free, fully_free))
        opened = sum(1 for p in positions if node.gpu_used_milli[p] == 0)
        if opened:
            return float(max(100 // 2 - opened, 100 // 3))
        left_pct = sum((FULL_GPU_MILLI - node.gpu_used_milli[p]) * 100 // FULL_GPU_MILLI for p in positions)
        return float(max(100 - left_pct // 10, 100 // 2))
