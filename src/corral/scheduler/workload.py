"""The expected workload: how often each request shape arrives (pure). FGD and corral score against it."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate

from corral.core.requests import ResourceRequest, model_matches
from corral.core.resources import NodeInfo


@dataclass(frozen=True, slots=True)
class Shape:
    """The part of a request that decides where it can go."""

    cpu_milli: int
    gpu_milli: int  # per GPU; 1000 for whole GPUs
    gpus: int
    gpu_models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ShapeGroup:
    """Shapes that differ only in CPU: their GPU verdict on a node is shared, so it is computed once.

    `cpus` is sorted; `cum_prob[i]` is the probability mass of shapes with cpu <= cpus[i].
    """

    gpu_milli: int
    gpus: int
    gpu_models: tuple[str, ...]
    prob: float
    cpus: tuple[int, ...]
    cum_prob: tuple[float, ...]

    def prob_cpu_fits(self, cpu_left: int) -> float:
        i = bisect_right(self.cpus, cpu_left)
        return self.cum_prob[i - 1] if i else 0.0

    def accessible(self, model: str) -> bool:
        return model_matches(model, self.gpu_models)


@dataclass(frozen=True, slots=True)
class WorkloadProfile:
    """A distribution over GPU request shapes (CPU-only shapes are left out, as in FGD's artifact)."""

    shapes: tuple[tuple[Shape, float], ...]
    groups: tuple[ShapeGroup, ...]


def shape_of(request: ResourceRequest) -> Shape:
    return Shape(request.cpu_milli, request.gpu_milli if request.gpus else 0, request.gpus, request.gpu_models)


def compute_workload_profile(requests: Iterable[ResourceRequest], weight_by_gpu: bool = False) -> WorkloadProfile:
    """Frequencies of the GPU shapes in `requests`. With `weight_by_gpu`, each shape counts by the
    GPU capacity it asks for (the chance that the next unit of demand comes from it)."""
    counts: dict[Shape, float] = {}  # not a Counter: the weights are fractional
    for r in requests:
        if r.gpus:
            shape = shape_of(r)
            counts[shape] = counts.get(shape, 0) + (r.gpus * r.gpu_milli / 1000 if weight_by_gpu else 1)
    return profile_from_counts(counts)


def profile_from_counts(counts: Counter[Shape] | dict[Shape, float]) -> WorkloadProfile:
    total = float(sum(counts.values())) or 1.0
    shapes = tuple(sorted(((s, c / total) for s, c in counts.items()), key=lambda sc: (-sc[1], repr(sc[0]))))
    by_gpu: dict[tuple[int, int, tuple[str, ...]], list[tuple[int, float]]] = {}
    for s, p in shapes:
        by_gpu.setdefault((s.gpu_milli, s.gpus, s.gpu_models), []).append((s.cpu_milli, p))
    groups = []
    for (milli, gpus, models), items in sorted(by_gpu.items(), key=lambda kv: repr(kv[0])):
        items.sort()
        cpus = tuple(c for c, _ in items)
        cum = tuple(accumulate(p for _, p in items))
        groups.append(ShapeGroup(milli, gpus, models, cum[-1], cpus, cum))
    return WorkloadProfile(shapes, tuple(groups))


# Used when the caller knows nothing about its workload: a plausible mix of shares and whole GPUs.
DEFAULT_PROFILE = profile_from_counts(
    {
        Shape(4000, 250, 1): 1,
        Shape(4000, 500, 1): 2,
        Shape(8000, 1000, 1): 4,
        Shape(16000, 1000, 2): 1,
        Shape(32000, 1000, 4): 1,
        Shape(64000, 1000, 8): 1,
    }
)


def compute_gpu_supply(infos: Iterable[NodeInfo]) -> dict[str, int]:
    """Healthy GPUs per model over `infos`."""
    supply: Counter[str] = Counter()
    for info in infos:
        for g in info.gpus:
            if g.healthy:
                supply[g.model] += 1
    return dict(sorted(supply.items()))


def compute_model_contention(profile: WorkloadProfile, supply: Mapping[str, int]) -> dict[str, float]:
    """Per GPU model, the share of the GPU demand it can serve that only a subset of models can serve.

    Each shape's demand (probability x GPUs) is spread over the GPUs it may use; a model's pressure is
    what lands on one of its GPUs. Contention = restricted pressure / total pressure, in 0..1: 0 when
    only unrestricted shapes want the model, near 1 when restricted shapes crowd it.
    """
    restricted: dict[str, float] = dict.fromkeys(supply, 0.0)
    total: dict[str, float] = dict.fromkeys(supply, 0.0)
    for g in profile.groups:
        models = [m for m in supply if g.accessible(m)]
        reachable = sum(supply[m] for m in models)
        if not reachable:
            continue
        pressure = g.prob * g.gpus * g.gpu_milli / 1000 / reachable
        for m in models:
            total[m] += pressure
            if g.gpu_models:
                restricted[m] += pressure
    return {m: (restricted[m] / total[m] if total[m] else 0.0) for m in supply}
