"""The FGD artifact's placement protocol (Weng et al., ATC'23), run on the real scheduler (pure).

Per seed: shuffle the pods, then resample (with replacement) until the requested GPUs reach `inflate` x
the cluster's GPUs, as the artifact's workload tuning does (hkust-adsl/kubernetes-scheduler-simulator,
`TunePodsByNodeTotalResource`: the shuffled list first, random copies appended; a list already above the
target loses random pods). Place one at a time with no departures (a pod that fits nowhere stays
unplaced) and record the allocation ratio each time the arrived GPU request crosses k% of capacity.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corral.core.resources import NodeInfo
from corral.scheduler.cluster import Cluster
from corral.scheduler.cycle import Unschedulable
from corral.scheduler.framework import ScoreContext
from corral.scheduler.plugins import get_policy
from corral.scheduler.workload import compute_workload_profile
from corral.sim.openb import TracePod

CHECKPOINTS = (90, 95, 100, 110, 120, 130)


@dataclass(frozen=True, slots=True)
class SeedResult:
    seed: int
    alloc_pct: dict[int, float]  # checkpoint k -> allocated GPU % when arrived load crossed k%
    pods: int
    failed: int


@dataclass(frozen=True, slots=True)
class PolicyResult:
    policy: str
    seeds: tuple[SeedResult, ...]

    @property
    def alloc_pct(self) -> dict[str, float]:
        """Median over seeds per checkpoint (only checkpoints every seed reached)."""
        keys = [k for k in CHECKPOINTS if all(k in s.alloc_pct for s in self.seeds)]
        return {str(k): round(statistics.median(s.alloc_pct[k] for s in self.seeds), 2) for k in keys}

    @property
    def unallocated_pct_at_100(self) -> float:
        return round(100.0 - statistics.median(s.alloc_pct[100] for s in self.seeds), 2)


def compute_arrivals(pods: Sequence[TracePod], capacity_milli: int, inflate: float, rng: random.Random) -> list[TracePod]:
    """The artifact's workload tuning: shuffle the whole list, then while its GPU request exceeds
    `inflate` x capacity drop a random pod, and while it falls short append a random pod (sampled with
    replacement), so every listed pod arrives once before the copies and the request reaches the target."""
    order = list(pods)
    rng.shuffle(order)
    total = sum(p.request.total_gpu_milli for p in order)
    if total == 0:
        return order
    target = inflate * capacity_milli
    while total > target and order:
        total -= order.pop(rng.randrange(len(order))).request.total_gpu_milli
    while total < target:
        pod = pods[rng.randrange(len(pods))]
        order.append(pod)
        total += pod.request.total_gpu_milli
    return order


def run_seed(
    nodes: Sequence[NodeInfo], pods: Sequence[TracePod], policy: str, seed: int, inflate: float = 1.3,
    checkpoints: Sequence[int] = CHECKPOINTS,
) -> SeedResult:
    rng = random.Random(seed)
    ctx = ScoreContext(workload=compute_workload_profile(p.request for p in pods))
    cluster = Cluster(nodes, get_policy(policy), ctx, rng)
    capacity = cluster.gpu_capacity_milli
    arrivals = compute_arrivals(pods, capacity, inflate, rng)
    pending = sorted(checkpoints)
    alloc: dict[int, float] = {}
    arrived = failed = 0
    for pod in arrivals:
        if isinstance(cluster.place(pod.request), Unschedulable):
            failed += 1
        arrived += pod.request.total_gpu_milli
        while pending and arrived >= pending[0] / 100 * capacity:
            alloc[pending.pop(0)] = 100.0 * cluster.gpu_allocated_milli / capacity
    return SeedResult(seed, alloc, len(arrivals), failed)


def run_policy(
    nodes: Sequence[NodeInfo], pods: Sequence[TracePod], policy: str, seeds: Sequence[int], inflate: float = 1.3,
    on_seed_done: Callable[[SeedResult], None] | None = None,
) -> PolicyResult:
    results = []
    for seed in seeds:
        result = run_seed(nodes, pods, policy, seed, inflate)
        results.append(result)
        if on_seed_done:
            on_seed_done(result)
    return PolicyResult(policy, tuple(results))


def compute_report(result: PolicyResult, skipped: dict[str, int], pod_rows: int) -> dict[str, object]:
    """The JSON object `corral simulate openb --json` prints for one policy."""
    return {
        "policy": result.policy,
        "seeds": [s.seed for s in result.seeds],
        "alloc_pct": result.alloc_pct,
        "unallocated_pct_at_100": result.unallocated_pct_at_100,
        "unallocated_pct_at_100_per_seed": [round(100.0 - s.alloc_pct[100], 2) for s in result.seeds],
        "pods_arrived_median": statistics.median(s.pods for s in result.seeds),
        "pods_failed_median": statistics.median(s.failed for s in result.seeds),
        "pod_rows": pod_rows,
        "pod_rows_skipped": sum(skipped.values()),
        "skipped_reasons": dict(skipped),
    }


def parse_seeds(text: str) -> list[int]:
    """`42-51`, `42,43` or `7` -> seeds; ValidationError naming the field otherwise."""
    from corral.core.errors import ValidationError

    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            if sep:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValidationError("seeds", f"empty range {part!r}")
                seeds.extend(range(a, b + 1))
            else:
                seeds.append(int(lo))
    except ValueError:
        raise ValidationError("seeds", f"expected like 42-51 or 42,43, got {text!r}") from None
    return seeds
