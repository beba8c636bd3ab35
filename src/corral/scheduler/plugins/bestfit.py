"""`bestfit`: the node with the least free capacity left after placing (best-fit bin packing).

Source: BestFit as defined in Weng et al., ATC'23 and scored as in its artifact
(hkust-adsl/kubernetes-scheduler-simulator, plugin/best_fit_score.go): leftover CPU and GPU, each as a
fraction of the largest node spec (128 CPUs, 8 GPUs), weighted equally, as an integer 0..100 so that
near-equal nodes tie and the engine breaks ties at random. After Panigrahy et al., "Heuristics for
vector bin packing" (2011).
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext
from corral.scheduler.plugins.measures import gpu_free_milli

MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000


class BestFit:
    name = "bestfit"
    gpu_aware = False

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        cpu_left = node.info.cpu_milli - node.cpu_used_milli - request.cpu_milli
        gpu_left = gpu_free_milli(node) - request.total_gpu_milli
        leftover = 0.5 * cpu_left / MAX_SPEC_CPU_MILLI + 0.5 * gpu_left / MAX_SPEC_GPU_MILLI
        return float(int((1.0 - leftover) * 100.0))
