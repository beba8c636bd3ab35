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

from collections.abc import Mapping, Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import FULL_GPU_MILLI, NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext
from corral.scheduler.plugins.fgd import FragmentationMemo
from corral.scheduler.plugins.measures import gpu_capacity_milli, gpu_free_milli
from corral.scheduler.workload import DEFAULT_PROFILE, WorkloadProfile, compute_model_contention


def compute_packing_tier(node: NodeState, request: ResourceRequest, positions: Sequence[int]) -> float:
    """2 + used fraction on a shared GPU, 1 + it on a used node, 0 + it on an idle node."""
    cap = gpu_capacity_milli(node)
    used_after = 1.0 - (gpu_free_milli(node) - request.total_gpu_milli) / cap if cap else 0.0
    if any(node.gpu_used_milli[p] > 0 for p in positions):
        return 2.0 + used_after
    if node.cpu_used_milli > 0 or any(node.gpu_used_milli):
        return 1.0 + used_after
    return used_after


def compute_cpu_per_gpu(profile: WorkloadProfile) -> float:
    """CPU milli the expected GPU demand brings per GPU."""
    gpus = sum(p * s.gpus * s.gpu_milli / FULL_GPU_MILLI for s, p in profile.shapes)
    cpu = sum(p * s.cpu_milli for s, p in profile.shapes)
    return cpu / gpus if gpus else 0.0


def compute_stranded_gpus(free_gpu_milli: int, free_cpu_milli: int, cpu_per_gpu: float) -> float:
    """Free GPUs (in GPUs) the node's free CPU cannot back at the workload's CPU-per-GPU ratio."""
    if cpu_per_gpu <= 0:
        return 0.0
    return max(0.0, free_gpu_milli / FULL_GPU_MILLI - free_cpu_milli / cpu_per_gpu)


def compute_strand_delta(node: NodeState, request: ResourceRequest, cpu_per_gpu: float) -> float:
    """Growth of stranded GPUs if `request` lands on `node`."""
    free_gpu = gpu_free_milli(node)
    free_cpu = node.info.cpu_milli - node.cpu_used_milli
    before = compute_stranded_gpus(free_gpu, free_cpu, cpu_per_gpu)
    after = compute_stranded_gpus(free_gpu - request.total_gpu_milli, free_cpu - request.cpu_milli, cpu_per_gpu)
    return after - before


def compute_reserved_share(profile: WorkloadProfile) -> float:
    """Probability that the next GPU request is restricted to particular GPU models."""
    return sum(g.prob for g in profile.groups if g.gpu_models)


class Corral:
    name = "corral"
    gpu_aware = True
    packing_weight = 0.1
    reserve_damping = 50.0
    contention_weight = 0.1
    strand_weight = 2.0

    def __init__(self) -> None:
        self._memo = FragmentationMemo()
        self._weights: dict[int, float] = {}
        self._contention: tuple[object, object, dict[str, float]] = (None, None, {})
        self._cpu_per_gpu: dict[int, float] = {}

    def _contention_of(self, profile: WorkloadProfile, supply: Mapping[str, int] | None) -> dict[str, float]:
        seen_profile, seen_supply, value = self._contention
        if seen_profile is not profile or seen_supply is not supply:
            value = compute_model_contention(profile, supply) if supply else {}
            self._contention = (profile, supply, value)
        return value

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
        score = -delta + self._packing_weight(profile) * compute_packing_tier(node, request, positions)
        if self.strand_weight:
            rho = self._cpu_per_gpu.get(id(profile))
            if rho is None:
                rho = self._cpu_per_gpu[id(profile)] = compute_cpu_per_gpu(profile)
            score -= self.strand_weight * compute_strand_delta(node, request, rho)
        if positions and self.contention_weight:
            contention = self._contention_of(profile, ctx.gpu_supply).get(node.info.gpus[positions[0]].model, 0.0)
            score -= self.contention_weight * contention * request.total_gpu_milli / FULL_GPU_MILLI
        return score
