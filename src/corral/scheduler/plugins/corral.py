"""`corral`: Corral's default policy: fragmentation gradient descent, then packing.

Source: builds on FGD (Weng et al., ATC'23) and Packing (Gandiva, OSDI'18); the combination and its
damping are Corral's own (docs/scheduling.md). Score = -Δ(expected fragmentation) in GPUs + w x a
packing tier (2 + used fraction when the request lands on a GPU already shared, 1 + it on a node
already in use, the used fraction alone on an idle node), with w = 0.1 / (1 + 50 r), r = the share of
expected GPU demand restricted to particular models. Why: FGD is myopic and indifferent between many
moves; among those, filling what is already open keeps idle nodes and whole GPUs for the multi-GPU
and large-share requests that come later. Packing crowds out model-restricted demand, so its weight
decays as that demand grows and the policy tends to plain FGD.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import FULL_GPU_MILLI, NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext
from corral.scheduler.plugins.fgd import FragmentationMemo
from corral.scheduler.plugins.measures import gpu_capacity_milli, gpu_free_milli
from corral.scheduler.workload import DEFAULT_PROFILE, WorkloadProfile


def compute_packing_tier(node: NodeState, request: ResourceRequest, positions: Sequence[int]) -> float:
    """2 + used fraction on a shared GPU, 1 + it on a used node, 0 + it on an idle node."""
    cap = gpu_capacity_milli(node)
    used_after = 1.0 - (gpu_free_milli(node) - request.total_gpu_milli) / cap if cap else 0.0
    if any(node.gpu_used_milli[p] > 0 for p in positions):
        return 2.0 + used_after
    if node.cpu_used_milli > 0 or any(node.gpu_used_milli):
        return 1.0 + used_after
    return used_after


def compute_reserved_share(profile: WorkloadProfile) -> float:
    """Probability that the next GPU request is restricted to particular GPU models."""
    return sum(g.prob for g in profile.groups if g.gpu_models)


class Corral:
    name = "corral"
    gpu_aware = True
    packing_weight = 0.1
    reserve_damping = 50.0

    def __init__(self) -> None:
        self._memo = FragmentationMemo()
        self._weights: dict[int, float] = {}

    def _packing_weight(self, profile: WorkloadProfile) -> float:
        w = self._weights.get(id(profile))
        if w is None:
            w = self.packing_weight / (1.0 + self.reserve_damping * compute_reserved_share(profile))
            self._weights[id(profile)] = w
        return w

    def score_node(
        self, node: NodeState, request: ResourceRequest, positions: Sequence[int] = (), ctx: ScoreContext = DEFAULT_CONTEXT
    ) -> float:
        profile = ctx.workload or DEFAULT_PROFILE
        delta = self._memo.delta(node, request, positions, profile) / FULL_GPU_MILLI
        return -delta + self._packing_weight(profile) * compute_packing_tier(node, request, positions)
