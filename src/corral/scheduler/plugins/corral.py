"""`corral`: Corral's default policy: FGD's fragmentation, plus the GPUs a placement strands for lack of
CPU, the contention for the GPU model it takes, and packing.

Source: builds on FGD (Weng et al., ATC'23) and Packing (Gandiva, OSDI'18); the stranded-GPU and
model-contention terms and the weights are Corral's own (docs/scheduling.md). Score, in GPUs =
-Δ(expected fragmentation) - 2.0 x Δ(stranded GPUs) - 0.5 x contention(model) x GPUs taken
+ w x packing tier. Why: FGD asks whether the *next* request still fits a node, so it happily leaves a
node with free GPUs and almost no CPU (one small pod fits, the rest is lost); the stranded term counts
the free GPUs the free CPU cannot back at the workload's CPU per GPU. FGD also sees model-restricted
demand only through fixed per-shape weights and drains scarce models that restricted requests need;
the contention term charges each GPU taken by how much of its model's demand can run nowhere else.
Packing (w = 0.1 / (1 + 50 r), r = restricted share of demand) fills what is open among otherwise
equal moves, and fades where it would crowd out restricted demand.
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
    contention_weight = 0.5
    strand_weight = 2.0

    def __init__(self) -> None:
        self._memo = FragmentationMemo()
        # Per-workload constants, for the last profile seen (an engine scores against one profile).
        self._profile_terms: tuple[WorkloadProfile | None, float, float] = (None, 0.0, 0.0)
        self._contention: tuple[object, object, dict[str, float]] = (None, None, {})

    def _contention_of(self, profile: WorkloadProfile, supply: Mapping[str, int] | None) -> dict[str, float]:
        seen_profile, seen_supply, value = self._contention
        if seen_profile is not profile or seen_supply is not supply:
            value = compute_model_contention(profile, supply) if supply else {}
            self._contention = (profile, supply, value)
        return value

    def _terms(self, profile: WorkloadProfile) -> tuple[float, float]:
        """(packing weight, CPU milli per GPU) for `profile`."""
        seen, weight, cpu_per_gpu = self._profile_terms
        if seen is not profile:
            weight = self.packing_weight / (1.0 + self.reserve_damping * compute_reserved_share(profile))
            cpu_per_gpu = compute_cpu_per_gpu(profile)
            self._profile_terms = (profile, weight, cpu_per_gpu)
        return weight, cpu_per_gpu

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        profile = ctx.workload or DEFAULT_PROFILE
        packing_weight, cpu_per_gpu = self._terms(profile)
        score = -self._memo.delta(node, request, positions, profile) / FULL_GPU_MILLI
        score -= self.strand_weight * compute_strand_delta(node, request, cpu_per_gpu)
        score += packing_weight * compute_packing_tier(node, request, positions)
        if positions and self.contention_weight:
            contention = self._contention_of(profile, ctx.gpu_supply).get(node.info.gpus[positions[0]].model, 0.0)
            score -= self.contention_weight * contention * request.total_gpu_milli / FULL_GPU_MILLI
        return score
