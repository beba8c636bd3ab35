"""`spread`: the node with the most free capacity left after placing (least allocated).

Source: Kubernetes `NodeResourcesFit` LeastAllocated strategy (pkg/scheduler/framework/plugins/
noderesources/least_allocated.go), with GPU, CPU and memory weighted equally.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext
from corral.scheduler.plugins.measures import free_after


class Spread:
    name = "spread"
    gpu_aware = False

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        return 100.0 * sum(free_after(node, request)) / 3.0
