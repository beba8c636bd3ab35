"""Room on whole nodes for a job that fragmentation blocks (pure).

A job asking several whole GPUs on one node (or a gang of them) can wait forever in a pool whose free
GPUs, by count, would take it many times over: each is on a different node, and small jobs keep filling
whatever frees up. Counting GPUs is no answer there; the nodes are. The cycle keeps nodes for such a job
(Slurm's reservations for a blocked job, Kubernetes' nominated node): the nodes closest to holding it
(fully free GPUs plus GPUs that exiting jobs are releasing), on which nothing else is placed while it
waits; where the policy allows preemption, the lowest-ranked jobs on them are preempted so that it starts
when they exit (least-attained service and quota reclaim on nodes, as the count-based path does on GPUs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from corral.core.resources import FULL_GPU_MILLI
from corral.scheduler.queueing.jobs import QueuedJob, RunningJob

# Nodes on which victims are looked for, per job and model, most promising first (bounds the work of one
# cycle on a large pool; the nodes after them would need more victims anyway).
MAX_VICTIM_NODES = 8


def is_node_bound(job: QueuedJob) -> bool:
    """True for a request that only whole free GPUs on one node can take (several whole GPUs per node, or a
    gang): fragmentation, not the GPU count, decides whether it fits."""
    req = job.to_request()
    return req.gpus > 0 and req.gpu_milli >= FULL_GPU_MILLI and (req.gpus >= 2 or job.nodes > 1)


@dataclass(slots=True)
class NodeIndex:
    """Running jobs by node (built once a cycle): where victims are, and GPUs that exiting jobs release."""

    running: Sequence[RunningJob]
    needs: Mapping[str, int] = field(default_factory=dict)  # pending job -> GPUs per node it asks for
    _exiting: dict[tuple[str, str], dict[str, int]] | None = None
    _on_node: dict[tuple[str, str], list[tuple[float, int]]] | None = None
    _orders: dict[tuple[str, str], dict[str, list[RunningJob]]] = field(default_factory=dict)

    def exiting(self, node: str, model: str, job_id: str) -> int:
        """GPUs of `model` on `node` held by jobs being preempted or cancelled (free once they exit); of those
        preempted for another waiting job, only what a part of it does not need (the rest are its)."""
        if self._exiting is None:
            self._exiting = {}
            for r in self.running:
                if r.terminating:
                    for name, gpus in r.parts:
                        by_job = self._exiting.setdefault((name, r.model), {})
                        by_job[r.preempted_for] = by_job.get(r.preempted_for, 0) + len(gpus)
        here = self._exiting.get((node, model))
        if not here:
            return 0
        return sum(
            gpus if for_id in ("", job_id) else max(gpus - self.needs.get(for_id, 0), 0)
            for for_id, gpus in here.items()
        )

    def on_node(self, node: str, model: str) -> list[tuple[float, int]]:
        """(start time, GPUs of `model` held on `node`) of each job running there, youngest first."""
        if self._on_node is None:
            self._on_node = {}
            for r in self.running:
                for name, gpus in r.parts:
                    self._on_node.setdefault((name, r.model), []).append((r.start_s, len(gpus)))
            for rows in self._on_node.values():
                rows.sort(reverse=True)
        return self._on_node.get((node, model), [])

    def drain_age(self, node: str, model: str, short: int, now_s: float) -> float:
        """How long the jobs that must end for `short` more GPUs to be free on `node` have run (the youngest
        first). Durations are unknown; as least-attained-service assumes, a job that has run long is likely
        to run long, so the node whose oldest needed job is youngest should drain first."""
        freed = 0
        for start_s, gpus in self.on_node(node, model):
            freed += gpus
            if freed >= short:
                return now_s - start_s
        return float("inf")

    def exiting_for(self, node: str, job_id: str) -> bool:
        """True when a job exiting on `node` was preempted for `job_id`."""
        return any(r.preempted_for == job_id and any(n == node for n, _ in r.parts) for r in self.running)

    def candidates(
        self, key: tuple[str, str], node: str, order: Callable[[], Iterable[RunningJob]]
    ) -> list[RunningJob]:
        """Victim candidates on `node`, in the global victim order `order()` gives for `key` (kind, model)."""
        by_node = self._orders.get(key)
        if by_node is None:
            by_node = self._orders[key] = {}
            for r in order():
                for name, _ in r.parts:
                    by_node.setdefault(name, []).append(r)
        return by_node.get(node, [])


def rank_nodes(
    free: Sequence[tuple[str, int]], index: NodeIndex, model: str, job: QueuedJob, gpus: int
) -> list[tuple[str, int, int]]:
    """(node, free GPUs, free + exiting GPUs), closest to holding `gpus` first. A single-node job skips
    nodes where they fit on free GPUs alone: something other than GPUs blocks it there; a gang counts them
    (its other parts are what is missing)."""
    rows = [(name, f, f + index.exiting(name, model, job.id)) for name, f in free if job.nodes > 1 or f < gpus]
    rows.sort(key=lambda r: -min(r[2], gpus))  # stable: ties keep the ledger's order (most free first)
    return rows


__all__ = ["MAX_VICTIM_NODES", "NodeIndex", "is_node_bound", "rank_nodes"]
