"""A Ledger over real nodes: fits are decided by the placement engine (scheduler/cluster.py) with each job's
full request, so a job is admitted only where it can actually be placed, all gang parts at once or none,
and the placement found is the one the plan carries."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from corral.core.resources import FULL_GPU_MILLI, NodeState, Placement
from corral.scheduler.choices import Unschedulable
from corral.scheduler.cluster import Cluster
from corral.scheduler.framework import DEFAULT_CONTEXT, PlacementPolicy, ScoreContext
from corral.scheduler.plugins import DEFAULT_POLICY
from corral.scheduler.queueing import reasons
from corral.scheduler.queueing.capacity import Fit
from corral.scheduler.queueing.jobs import QueuedJob, RunningJob


class NodeLedger:
    """Free capacity is the cluster's; `placements[job_id]` holds where admitted jobs go (the plan the
    caller applies). `check` finds a placement without applying it; `take` applies that same placement.
    Jobs being preempted still hold their GPUs in the snapshot; `incoming` counts them. Pass `cluster`
    to place into a live one (the simulators keep theirs across cycles); it is mutated by `take`."""

    knows_nodes = True

    def __init__(
        self,
        nodes: Sequence[NodeState],
        running: Sequence[RunningJob],
        policy: PlacementPolicy | str = DEFAULT_POLICY,
        rng: random.Random | None = None,
        *,
        ctx: ScoreContext = DEFAULT_CONTEXT,
        cluster: Cluster | None = None,
    ) -> None:
        self.cluster = cluster if cluster is not None else Cluster.from_states(nodes, policy, ctx, rng)
        self._models = self.cluster.gpu_models()
        self._incoming = {m: 0 for m in self._models}
        for r in running:
            if r.terminating:
                self._incoming[r.model] = self._incoming.get(r.model, 0) + r.job.need_milli
        self._reserved = {m: 0 for m in self._models}
        self.placements: dict[str, list[Placement]] = {}
        self._held_free: dict[str, int] = {}  # held node -> its free milli-GPUs counted as reserved
        self._spots: list[Placement] = []  # room kept for jobs that move (keep_spot), given back by end_cycle
        self._last: tuple[str, str, list[Placement]] | None = None  # (job id, model, placements) of check()

    def models(self) -> Sequence[str]:
        return self._models

    def free(self, model: str) -> int:
        """O(1): the cluster keeps its free milli-GPUs per model up to date."""
        return self.cluster.free_milli(model) - self._reserved.get(model, 0)

    def incoming(self, model: str) -> int:
        return max(self._incoming.get(model, 0), 0)

    def _find(self, job: QueuedJob) -> list[Placement] | Unschedulable:
        req = job.to_request()
        if job.nodes == 1:
            got = self.cluster.find(req)
            return got if isinstance(got, Unschedulable) else [got]
        parts = self.cluster.find_gang(req, job.nodes)
        if isinstance(parts, Unschedulable) or job.model or len({self.cluster.model_of(p) for p in parts}) == 1:
            return parts
        # A gang of any model landed on several: a gang runs on one model (its quota is counted on one), its first
        # part's if it fits there, else the first other model it fits on.
        first = self.cluster.model_of(parts[0])
        held: list[Placement] | Unschedulable = parts
        for model in [first, *(m for m in self._models if m != first and job.matches(m))]:
            held = self._find(replace(job, model=model))
            if not isinstance(held, Unschedulable):
                return held
        return held

    def check(self, job: QueuedJob) -> Fit:
        matching = [m for m in self._models if job.matches(m)]
        if not matching:
            return None, reasons.MODEL, job.no_gpus_detail()
        got = self._find(job)
        if isinstance(got, Unschedulable):
            if not got.resolvable:
                return None, reasons.MODEL, got.reason
            partial = job.need_milli > 1000 and any(self.free(m) > 0 for m in matching)
            return None, reasons.GANG if partial else reasons.CAPACITY, got.reason
        model = self.cluster.model_of(got[0]) or matching[0]
        if self.free(model) < job.need_milli:  # GPUs held back for a job waiting on preemption
            return None, reasons.CAPACITY, f"{model} GPUs are reserved for a job waiting on preemption"
        self._last = (job.id, model, got)
        return model, "", ""

    def take(self, job: QueuedJob, model: str) -> None:
        if self._last is not None and self._last[:2] == (job.id, model):
            got = self._last[2]
        else:
            found = self._find(job if job.model else replace(job, model=model))
            assert not isinstance(found, Unschedulable), "take() after a failed check()"
            got = found
        for p in got:
            self.cluster.apply(p)
        self.placements[job.id] = got
        self._last = None

    def reserve(self, job: QueuedJob, model: str) -> None:
        from_free = min(max(self.free(model), 0), job.need_milli)
        self._reserved[model] = self._reserved.get(model, 0) + from_free
        self._incoming[model] = self._incoming.get(model, 0) - (job.need_milli - from_free)

    def release(self, model: str, milli: int) -> None:
        self._incoming[model] = self.incoming(model) + milli

    def whole_free(self, model: str, gpus: int) -> Sequence[tuple[str, int]]:
        return self.cluster.whole_free(model, gpus)

    def hold_nodes(self, model: str, nodes: Sequence[str], incoming_milli: int = 0) -> None:
        self._incoming[model] = self._incoming.get(model, 0) - incoming_milli
        for name in nodes:
            if name in self._held_free:
                continue
            self._held_free[name] = self.cluster.whole_free_on(name, model) * FULL_GPU_MILLI
            self._reserved[model] = self._reserved.get(model, 0) + self._held_free[name]
            if self.cluster.models_on(name) == {model}:  # a node of several models stays open to the others
                self.cluster.hold(name)

    def unhold_nodes(self, model: str, nodes: Sequence[str]) -> None:
        for name in nodes:
            self._reserved[model] = self._reserved.get(model, 0) - self._held_free.pop(name, 0)
            self.cluster.unhold(name)

    def keep_spot(self, job: QueuedJob) -> bool:
        got = self._find(job)
        if isinstance(got, Unschedulable):
            return False
        for p in got:
            self.cluster.apply(p)
        self._spots += got
        return True

    def end_cycle(self) -> None:
        for p in self._spots:
            self.cluster.release(p)
        self._spots = []
        self.cluster.release_holds()
