"""A Ledger over real nodes: fits are decided by the placement code (scheduler/cycle.py and gang.py), so
the server admits a job only where it can actually be placed, all gang members at once or none."""

from __future__ import annotations

import random
from collections.abc import Sequence

from corral.core.resources import NodeState, Placement
from corral.scheduler.cycle import Unschedulable, apply_placement, compute_placement
from corral.scheduler.framework import PlacementPolicy
from corral.scheduler.gang import compute_gang_placement
from corral.scheduler.plugins import DEFAULT_POLICY
from corral.scheduler.queueing import reasons
from corral.scheduler.queueing.capacity import Fit
from corral.scheduler.queueing.jobs import QueuedJob, RunningJob


class NodeLedger:
    """Free capacity is the snapshot's; `placements[job_id]` holds where admitted jobs go (the plan the
    server applies). Jobs being preempted still hold their GPUs in the snapshot; `incoming` counts them."""

    def __init__(
        self, nodes: Sequence[NodeState], running: Sequence[RunningJob],
        policy: PlacementPolicy | str = DEFAULT_POLICY, rng: random.Random | None = None,
    ) -> None:
        self._nodes = [n for n in nodes if n.schedulable]
        self._policy = policy
        self._rng = rng
        self._models = sorted({g.model for n in self._nodes for g in n.info.gpus})
        self._incoming = {m: 0 for m in self._models}
        for r in running:
            if r.terminating:
                self._incoming[r.model] = self._incoming.get(r.model, 0) + r.job.need_milli
        self._reserved = {m: 0 for m in self._models}
        self.placements: dict[str, list[Placement]] = {}
        self._last: tuple[str, list[Placement]] | None = None

    def models(self) -> Sequence[str]:
        return self._models

    def free(self, model: str) -> int:
        total = 0
        for n in self._nodes:
            for g, used in zip(n.info.gpus, n.gpu_used_milli):
                if g.model == model and g.healthy:
                    total += 1000 - used
        return total - self._reserved.get(model, 0)

    def incoming(self, model: str) -> int:
        return max(self._incoming.get(model, 0), 0)

    def _place(self, job: QueuedJob) -> list[Placement] | Unschedulable:
        req = job.to_request()
        if job.nodes == 1:
            got = compute_placement(req, self._nodes, self._policy, self._rng)
            return got if isinstance(got, Unschedulable) else [got]
        return compute_gang_placement(req, job.nodes, self._nodes, self._policy, self._rng)

    def check(self, job: QueuedJob) -> Fit:
        matching = [m for m in self._models if job.matches(m)]
        if not matching:
            return None, reasons.MODEL, f"no {job.model} GPUs in the pool"
        got = self._place(job)
        if isinstance(got, Unschedulable):
            if not got.resolvable:
                return None, reasons.MODEL, got.reason
            partial = job.need_milli > 1000 and any(self.free(m) > 0 for m in matching)
            return None, reasons.GANG if partial else reasons.CAPACITY, got.reason
        model = self._model_of(got[0])
        if self.free(model) < job.need_milli:  # GPUs held back for a job waiting on preemption
            return None, reasons.CAPACITY, f"{model} GPUs are reserved for a job waiting on preemption"
        self._last = (job.id, got)
        return model, "", ""

    def _model_of(self, p: Placement) -> str:
        node = next(n for n in self._nodes if n.info.name == p.node)
        return next(g.model for g in node.info.gpus if g.index in p.gpu_indices)

    def take(self, job: QueuedJob, model: str) -> None:
        got = self._last[1] if self._last and self._last[0] == job.id else self._place(job)
        assert not isinstance(got, Unschedulable), "take() after a failed check()"
        for p in got:
            apply_placement(self._nodes, p)
        self.placements[job.id] = got
        self._last = None

    def reserve(self, job: QueuedJob, model: str) -> None:
        from_free = min(max(self.free(model), 0), job.need_milli)
        self._reserved[model] = self._reserved.get(model, 0) + from_free
        self._incoming[model] = self._incoming.get(model, 0) - (job.need_milli - from_free)

    def release(self, model: str, milli: int) -> None:
        self._incoming[model] = self.incoming(model) + milli
