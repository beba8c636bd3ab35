"""Which pending jobs fit no existing node but would fit a node of some instance type (pure).

Never a guess: the scheduler's own placement engine (scheduler/cluster.py) judges both, over the cycle's own
snapshot with its plan applied, and over an empty node of each instance type (its GPUs, model, memory, CPUs,
labels and taints, spot's taint included).
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.autoscaler.model import Demand
from corral.core.pools import NODE_LABEL, PoolSpec
from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.scheduler.choices import Unschedulable
from corral.scheduler.cluster import Cluster
from corral.scheduler.plan import UNRANKED, Plan, Snapshot
from corral.scheduler.queueing import reasons
from corral.scheduler.queueing.jobs import QueuedJob

# Pending for a reason no new node changes: the tenant's quota, an array's limit, victims already leaving.
NOT_DEMAND = frozenset({reasons.QUOTA, reasons.BORROW, reasons.ARRAY_LIMIT, reasons.PREEMPTING})


def compute_request(job: QueuedJob) -> ResourceRequest:
    return job.request if job.request is not None else job.to_request()


class TypeFit:
    """Whether one part of a request fits an empty node of an instance type (cached per request and type)."""

    def __init__(self, pools: Sequence[PoolSpec]) -> None:
        self._engines = {
            (p.name, t.name): Cluster.from_states(
                [NodeState(t.node_info(f"{p.name}-virtual", p.node_labels(), p.taints))]
            )
            for p in pools
            for t in p.instance_types
        }
        self._cache: dict[tuple[str, str, ResourceRequest], bool] = {}

    def fits(self, pool: str, type_name: str, request: ResourceRequest) -> bool:
        key = (pool, type_name, request)
        if key not in self._cache:
            engine = self._engines.get((pool, type_name))
            self._cache[key] = engine is not None and not isinstance(engine.find(request), Unschedulable)
        return self._cache[key]

    def fitting(self, pools: Sequence[PoolSpec], request: ResourceRequest) -> tuple[tuple[str, str], ...]:
        return tuple((p.name, t.name) for p in pools for t in p.instance_types if self.fits(p.name, t.name, request))


def compute_demand(
    snapshot: Snapshot, plan: Plan, pools: Sequence[PoolSpec]
) -> tuple[tuple[Demand, ...], tuple[NodeState, ...], frozenset[str]]:
    """The pending jobs (queue order) that no existing node can take now, each with the instance types it fits;
    the existing nodes with what is left on them (the plan's admissions applied, then the pending jobs that do fit
    them, in queue order, so two jobs are not both counted on one free slot); and the nodes those pending jobs
    fit (wanted: not idle, whatever their GPUs say)."""
    engine = Cluster.from_states(snapshot.nodes)
    for admit in plan.admit:
        for p in admit.placements:
            engine.apply(p)
    by_id = {j.id: j for j in snapshot.queue.pending}
    waiting: list[tuple[int, float, QueuedJob]] = []
    for job_id, status in plan.pending.items():
        job = by_id.get(job_id)
        if job is None or status.reason in NOT_DEMAND:
            continue
        position = status.position if status.position != UNRANKED else 1 << 30
        waiting.append((position, job.submit_s, job))
    waiting.sort(key=lambda w: (w[0], w[1]))
    fit = TypeFit(pools)
    demand: list[Demand] = []
    wanted: set[str] = {p.node for admit in plan.admit for p in admit.placements}
    for position, _, job in waiting:
        request = compute_request(job)
        pinned = [n for k, v in request.node_selector if k == NODE_LABEL for n in v.split("|")]
        if pinned:  # its input is staged on that node: it waits for it, no other node would do
            wanted.update(pinned)
            continue
        got = engine.place(request) if job.nodes == 1 else engine.place_gang(request, job.nodes)
        if not isinstance(got, Unschedulable):
            wanted.update(p.node for p in (got if isinstance(got, list) else [got]))
            continue  # it fits what exists: the scheduler places it when its turn comes
        demand.append(Demand(job.id, job.tenant, request, job.nodes, position, fit.fitting(pools, request)))
    return tuple(demand), tuple(engine.node_states()), frozenset(wanted)


__all__ = ["NOT_DEMAND", "TypeFit", "compute_demand", "compute_request"]
