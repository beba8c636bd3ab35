"""`fgd`: Fragmentation Gradient Descent: the placement that least increases the node's expected GPU
fragmentation, measured against the workload's distribution of request shapes.

Source: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC'23 (section 4.2, Algorithm 1); fragment measure as in its artifact
(hkust-adsl/kubernetes-scheduler-simulator, pkg/utils/frag.go) and scored as in its plugin
(plugin/fgd_score.go): int(100 x sigmoid(-Δfragmentation in GPUs)), so moves within about 0.04 GPU
of each other tie and the engine's tie rule decides among them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from corral.core.requests import ResourceRequest
from corral.core.resources import FULL_GPU_MILLI, NodeState
from corral.scheduler.fragmentation import compute_fragmentation
from corral.scheduler.framework import DEFAULT_CONTEXT, ScoreContext
from corral.scheduler.plugins.measures import free_lists_after
from corral.scheduler.workload import DEFAULT_PROFILE, WorkloadProfile

_MEMO_LIMIT = 1_000_000


class FragmentationMemo:
    """Fragmentation by (free GPUs, CPU left, profile): nodes in the same state share one computation."""

    def __init__(self) -> None:
        self._memo: dict[tuple[object, ...], float] = {}
        self._profiles: dict[int, WorkloadProfile] = {}  # keeps keyed profiles alive, so ids stay unique

    def fragmentation(self, free: list[int], models: list[str], cpu_left: int, profile: WorkloadProfile) -> float:
        key = (id(profile), tuple(sorted(zip(free, models))), cpu_left)
        value = self._memo.get(key)
        if value is None:
            if len(self._memo) > _MEMO_LIMIT:
                self._memo.clear()
                self._profiles.clear()
            self._profiles[id(profile)] = profile
            value = compute_fragmentation(free, models, cpu_left, profile)
            self._memo[key] = value
        return value

    def delta(
        self, node: NodeState, request: ResourceRequest, positions: Sequence[int], profile: WorkloadProfile
    ) -> float:
        """Growth of the node's fragmentation (milli-GPU) if `request` goes on `positions`."""
        empty = ResourceRequest(gpus=0, cpu_milli=0)
        before = self.fragmentation(*free_lists_after(node, empty, ()), profile)
        after = self.fragmentation(*free_lists_after(node, request, positions), profile)
        return after - before


class FragmentationGradientDescent:
    name = "fgd"
    gpu_aware = True

    def __init__(self) -> None:
        self._memo = FragmentationMemo()

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        profile = ctx.workload or DEFAULT_PROFILE
        gain = -self._memo.delta(node, request, positions, profile) / FULL_GPU_MILLI
        return float(int(100.0 / (1.0 + math.exp(-gain))))
