"""The FGD artifact's placement protocol (Weng et al., ATC'23), run through the server's cycle (in memory).

Per seed: shuffle the pods, then resample (with replacement) until the requested GPUs reach `inflate` x
the cluster's GPUs, as the artifact's workload tuning does (hkust-adsl/kubernetes-scheduler-simulator,
`TunePodsByNodeTotalResource`: the shuffled list first, random copies appended; a list already above the
target loses random pods). Pods arrive in that order and are submitted as jobs to an in-memory store;
one cycle (`scheduler.plan.compute_plan`, best-effort FIFO, on a live `Cluster`, committed by
`store.applier.apply_plan`) runs over all pods that arrived since the last one, with no departures (a
pod left pending after its cycle is cancelled: it fits nowhere), and the allocation ratio is
recorded each time the arrived GPU request crosses k% of capacity. The server places jobs without GPUs
first within a cycle, so a CPU-only pod arriving after GPU pods starts the next cycle: the batches then
give exactly the allocations of placing one pod at a time (`run_seed_sequential`, tested equal).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corral.core.resources import NodeInfo
from corral.core.states import JobState
from corral.scheduler.cluster import Cluster
from corral.scheduler.cycle import Unschedulable
from corral.scheduler.framework import ScoreContext
from corral.scheduler.plan import Snapshot, compute_plan
from corral.scheduler.plugins import get_policy
from corral.scheduler.queueing import QueuedJob, QueueingPolicy, QueueState
from corral.scheduler.workload import compute_workload_profile
from corral.sim.openb import TracePod
from corral.sim.store import EPOCH, load_store, submit_request
from corral.store.applier import apply_plan

CHECKPOINTS = (90, 95, 100, 110, 120, 130)
# Pods arrive in order and none waits: FIFO rank, no head blocking, no quotas, no preemption.
ARRIVAL_ORDER = QueueingPolicy("arrival", "fifo")


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


def compute_arrivals(
    pods: Sequence[TracePod], capacity_milli: int, inflate: float, rng: random.Random
) -> list[TracePod]:
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


def compute_pod_job(index: int, pod: TracePod, job_id: str = "") -> QueuedJob:
    """The job a pod is submitted as: its full request, ranked by arrival."""
    r = pod.request
    return QueuedJob(
        id=job_id or f"{index:07d}",
        tenant="openb",
        gpus=r.gpus,
        gpu_milli=r.gpu_milli,
        submit_s=float(index),
        request=r,
    )


def run_seed(
    nodes: Sequence[NodeInfo],
    pods: Sequence[TracePod],
    policy: str,
    seed: int,
    inflate: float = 1.3,
    checkpoints: Sequence[int] = CHECKPOINTS,
    cycles: list[int] | None = None,
) -> SeedResult:
    """One cycle per checkpoint interval (split where a CPU-only pod follows GPU pods); `cycles`, when
    given, is told each cycle's batch size."""
    rng = random.Random(seed)
    ctx = ScoreContext(workload=compute_workload_profile(p.request for p in pods))
    cluster = Cluster(nodes, get_policy(policy), ctx, rng)
    store = load_store(nodes)
    capacity = cluster.gpu_capacity_milli
    arrivals = compute_arrivals(pods, capacity, inflate, rng)
    pending = sorted(checkpoints)
    alloc: dict[int, float] = {}
    arrived = failed = 0
    batch: list[QueuedJob] = []

    def cycle() -> int:
        if not batch:
            return 0
        plan = compute_plan(
            Snapshot((), QueueState(list(batch))),
            batch[-1].submit_s,
            cluster.policy,
            ARRIVAL_ORDER,
            ctx=ctx,
            explain=False,
            cluster=cluster,
        )
        applied = apply_plan(store, plan, EPOCH)  # the store re-checks every GPU, as the server's does
        for a in plan.admit:
            if a.job_id in applied.rejected:
                for p in a.placements:
                    cluster.release(p)
        started = set(applied.started)
        for job in batch:  # fits nowhere: the artifact drops it
            if job.id not in started:
                store.finish_job(int(job.id), JobState.CANCELLED, None, "fits nowhere", EPOCH)
        if cycles is not None:
            cycles.append(len(batch))
        left = len(batch) - len(started)
        batch.clear()
        return left

    for i, pod in enumerate(arrivals):
        if pod.request.gpus == 0 and batch and batch[-1].gpus > 0:
            failed += cycle()
        batch.append(compute_pod_job(i, pod, str(submit_request(store, pod.request, pod.name, EPOCH))))
        arrived += pod.request.total_gpu_milli
        if pending and arrived >= pending[0] / 100 * capacity:
            failed += cycle()
        while pending and arrived >= pending[0] / 100 * capacity:
            alloc[pending.pop(0)] = 100.0 * cluster.gpu_allocated_milli / capacity
    failed += cycle()
    return SeedResult(seed, alloc, len(arrivals), failed)


def run_seed_sequential(
    nodes: Sequence[NodeInfo],
    pods: Sequence[TracePod],
    policy: str,
    seed: int,
    inflate: float = 1.3,
    checkpoints: Sequence[int] = CHECKPOINTS,
) -> SeedResult:
    """The artifact's protocol placing one pod at a time with `Cluster.place` (the reference the
    batched cycle must equal)."""
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
    nodes: Sequence[NodeInfo],
    pods: Sequence[TracePod],
    policy: str,
    seeds: Sequence[int],
    inflate: float = 1.3,
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
