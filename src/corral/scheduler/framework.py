"""Extension-point types shared by every policy: Status codes, reasons, the scoring context, the policy protocol."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState

if TYPE_CHECKING:
    from corral.scheduler.workload import WorkloadProfile


class Code(Enum):
    SUCCESS = "success"
    UNSCHEDULABLE = "unschedulable"  # would fit if capacity were freed (preemption/waiting helps)
    UNRESOLVABLE = "unresolvable"  # can never fit on this node as it is (waiting won't help)


# Rejection reasons are constants so explain() can count them per node.
REASON_UNSCHEDULABLE_NODE = "node not schedulable"
REASON_MODEL = "GPU model not allowed"
REASON_MEMORY = "GPU memory below minimum"
REASON_TOO_FEW_GPUS = "node has fewer GPUs than requested"
REASON_GPUS_BUSY = "not enough free GPUs"
REASON_CPU = "not enough free CPU"
REASON_MEM_HOST = "not enough free memory"
REASON_LABELS = "node labels do not match the selector"
REASON_TAINT = "node has a taint the request does not tolerate"
REASON_RUNTIME = "the job has an image and the node runs no containers (no docker runtime)"
REASON_NVLINK = "no NVLink island holds the requested GPUs"
REASON_MIG = "too few MIG instances of the requested profile"
REASON_ECC = "too few GPUs with ECC enabled"
REASON_HELD = "kept for a job waiting for a whole node"

# Reasons that capacity freed by finishing jobs (or preemption) can clear.
RESOLVABLE_REASONS = frozenset({REASON_GPUS_BUSY, REASON_CPU, REASON_MEM_HOST, REASON_NVLINK, REASON_HELD})


@dataclass(frozen=True, slots=True)
class Status:
    code: Code
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


SUCCESS = Status(Code.SUCCESS)


@dataclass(slots=True)
class Explanation:
    """Why a request fits nowhere: counts of nodes per reason (structured; `summary()` for humans)."""

    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, reason: str, count: int = 1) -> None:
        self.reasons[reason] += count

    @property
    def resolvable(self) -> bool:
        return any(r in RESOLVABLE_REASONS for r in self.reasons)

    def as_dict(self) -> dict[str, int]:
        return dict(self.reasons.most_common())

    def summary(self) -> str:
        if not self.reasons:
            return "no nodes registered"
        parts = [f"{n} node{'s' if n != 1 else ''}: {r}" for r, n in self.reasons.most_common()]
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class ScoreContext:
    """What a policy may know beyond one node: the expected workload (FGD, corral) and node ages (lru).

    `workload` is the distribution of request shapes the cluster expects; None lets policies use a
    built-in default. `last_used` maps node name -> a logical tick of its last placement (bigger = later).
    `gpu_supply` maps GPU model -> healthy GPUs of that model in the whole cluster (corral weighs how
    contended each model is); None means unknown, and the engines fill it from the nodes they are given.
    """

    workload: WorkloadProfile | None = None
    last_used: Mapping[str, int] = field(default_factory=dict)
    gpu_supply: Mapping[str, int] | None = None


DEFAULT_CONTEXT = ScoreContext()


class PlacementPolicy(Protocol):
    """A placement policy: scores one feasible (node, GPU choice) pair; higher is better, 0..100.

    `positions` are the GPU positions (into `node.info.gpus`) the request would get on this node.
    Contract: pure and deterministic (no clock, no global randomness), never mutates its arguments;
    it may memoise on its own instance. `gpu_aware` policies are offered every distinct GPU choice of a
    node (e.g. each GPU a share could go on); the others see only the topology allocator's choice.
    """

    name: str
    gpu_aware: bool

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        """Score a feasible placement of `request` on `positions` of `node`."""
        ...


# The name the server used before policies were pluggable; kept so old imports keep working.
NodeScorer = PlacementPolicy
