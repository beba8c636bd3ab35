"""Placement policies, one per file, found by name; `name:weight+name:weight` combines several."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from corral.core.errors import ValidationError
from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.framework import DEFAULT_CONTEXT, PlacementPolicy, ScoreContext
from corral.scheduler.plugins.bestfit import BestFit
from corral.scheduler.plugins.clustering import Clustering
from corral.scheduler.plugins.corral import Corral
from corral.scheduler.plugins.dotprod import DotProd
from corral.scheduler.plugins.fgd import FragmentationGradientDescent
from corral.scheduler.plugins.first_free import FirstFree
from corral.scheduler.plugins.lru import LeastRecentlyUsed
from corral.scheduler.plugins.packing import Packing
from corral.scheduler.plugins.random_fit import RandomFit
from corral.scheduler.plugins.spread import Spread
from corral.scheduler.plugins.topology_aware import TopologyAware

DEFAULT_POLICY = "corral"

_POLICIES: dict[str, Callable[[], PlacementPolicy]] = {
    p.name: p
    for p in (
        FirstFree,
        LeastRecentlyUsed,
        BestFit,
        Packing,
        Spread,
        Clustering,
        DotProd,
        RandomFit,
        TopologyAware,
        FragmentationGradientDescent,
        Corral,
    )
}


class WeightedPolicy:
    """Several policies at once: the weighted sum of their scores (`"fgd:1+packing:0.5"`)."""

    def __init__(self, parts: Sequence[tuple[PlacementPolicy, float]], name: str) -> None:
        self.parts = tuple(parts)
        self.name = name
        self.gpu_aware = any(p.gpu_aware for p, _ in self.parts)
        # what the engine reads of a policy besides its scores holds for the mix when it holds for one part: a part
        # that scores each node by its name (lru) makes the mix's scores per node too (no class of identical nodes
        # shares one score), and with first-free in it ties go to the first node, never to the seeded shuffle
        # ('random' is never mixed: get_policy)
        self.per_node = any(getattr(p, "per_node", False) for p, _ in self.parts)
        self.first_wins = any(getattr(p, "first_wins", False) for p, _ in self.parts)

    def score_node(
        self,
        node: NodeState,
        request: ResourceRequest,
        positions: Sequence[int] = (),
        ctx: ScoreContext = DEFAULT_CONTEXT,
    ) -> float:
        return sum(w * p.score_node(node, request, positions, ctx) for p, w in self.parts)


def policy_names() -> list[str]:
    return sorted(_POLICIES)


def _build_one(name: str) -> PlacementPolicy:
    try:
        return _POLICIES[name]()
    except KeyError:
        raise ValidationError("policy", f"unknown policy {name!r}; known: {', '.join(policy_names())}") from None


def get_policy(name: str) -> PlacementPolicy:
    """Build the policy called `name`, or a weighted mix `a:w+b:w`; ValidationError for an unknown one."""
    spec = name.strip()
    if ":" not in spec and "+" not in spec:
        return _build_one(spec)
    parts: list[tuple[PlacementPolicy, float]] = []
    for item in spec.split("+"):
        pname, _, weight = item.strip().partition(":")
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            raise ValidationError("policy", f"bad weight {weight!r} for {pname!r}; expected a number") from None
        if pname == "random":
            raise ValidationError("policy", "'random' cannot be combined with weights")
        parts.append((_build_one(pname), w))
    return WeightedPolicy(parts, spec)
