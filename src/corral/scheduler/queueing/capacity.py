"""The cycle's scratch view of free GPUs. `Ledger` is the protocol; `CountLedger` counts milli-GPUs per
model (fast, used by the simulator); node_capacity.NodeLedger places on real nodes (used by the server)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from corral.scheduler.queueing import reasons
from corral.scheduler.queueing.jobs import QueuedJob, RunningJob

Fit = tuple[str | None, str, str]  # (model it fits on, or None; reason code; detail)


class Ledger(Protocol):
    """Mutable for one admission cycle only; built from a snapshot, never shared between cycles.
    `knows_nodes`: fits are decided on real nodes (else by counting GPUs)."""

    knows_nodes: bool

    def models(self) -> Sequence[str]:
        """Pool GPU models, in a stable order."""
        ...

    def free(self, model: str) -> int:
        """Milli-GPUs of `model` neither held nor reserved in this cycle."""
        ...

    def incoming(self, model: str) -> int:
        """Milli-GPUs of `model` held by jobs being preempted and not yet claimed by a waiting job."""
        ...

    def check(self, job: QueuedJob) -> Fit:
        """Where the whole gang fits now (all parts or none); never changes the ledger."""
        ...

    def take(self, job: QueuedJob, model: str) -> None:
        """Record that `job` starts now on `model` (after a successful check)."""
        ...

    def reserve(self, job: QueuedJob, model: str) -> None:
        """Hold `job`'s GPUs for it: free ones first, then GPUs that preempted jobs will release."""
        ...

    def release(self, model: str, milli: int) -> None:
        """Record that a job preempted in this cycle will release `milli` of `model` (incoming)."""
        ...

    def whole_free(self, model: str, gpus: int) -> Sequence[tuple[str, int]]:
        """(node, fully free GPUs of `model`) for nodes open to placement with at least `gpus` GPUs of it,
        most free first; empty when the ledger does not know nodes (it only counts)."""
        ...

    def hold_nodes(self, model: str, nodes: Sequence[str], incoming_milli: int = 0) -> None:
        """Keep these nodes for one waiting job for the rest of the cycle (their free GPUs are no one else's,
        nor `incoming_milli` of what exiting jobs release there)."""
        ...

    def unhold_nodes(self, model: str, nodes: Sequence[str]) -> None:
        """Undo `hold_nodes`."""
        ...

    def keep_spot(self, job: QueuedJob) -> bool:
        """Find room for `job` (a running job about to move) on nodes open to placement and keep it for the
        rest of the cycle; False when there is none."""
        ...

    def end_cycle(self) -> None:
        """Give back what the cycle kept (held nodes, kept spots): the engine may outlive the cycle."""
        ...


class CountLedger:
    """Milli-GPU counts per model; a gang fits when its total fits in one model's free count."""

    knows_nodes = False

    def __init__(self, pool_milli: Mapping[str, int], running: Sequence[RunningJob]) -> None:
        self._pool = dict(pool_milli)
        self._free = dict(pool_milli)
        self._incoming = {m: 0 for m in pool_milli}
        for r in running:
            self._free[r.model] = self._free.get(r.model, 0) - r.job.need_milli
            if r.terminating:
                self._incoming[r.model] = self._incoming.get(r.model, 0) + r.job.need_milli

    def models(self) -> Sequence[str]:
        return list(self._pool)

    def free(self, model: str) -> int:
        return self._free.get(model, 0)

    def incoming(self, model: str) -> int:
        return max(self._incoming.get(model, 0), 0)

    def total_free(self) -> int:
        return sum(self._free.values())

    def check(self, job: QueuedJob) -> Fit:
        matching = [m for m in self._pool if job.matches(m)]
        if not matching:
            return None, reasons.MODEL, job.no_gpus_detail()
        if all(self._pool[m] < job.need_milli for m in matching):
            return (
                None,
                reasons.MODEL,
                f"asks for {job.need_milli / 1000:g} GPUs; the pool has at most {max(self._pool[m] for m in matching) / 1000:g} of a matching model",
            )
        fitting = [m for m in matching if self._free[m] >= job.need_milli]
        if fitting:
            return min(fitting, key=lambda m: (self._free[m], m)), "", ""  # best fit across models
        most = max(self._free[m] for m in matching)
        if most > 0 and job.need_milli > 1000:
            return None, reasons.GANG, f"{max(most, 0) / 1000:g} of {job.need_milli / 1000:g} GPUs free"
        return None, reasons.CAPACITY, f"{job.need_milli / 1000:g} GPUs needed, {max(most, 0) / 1000:g} free"

    def take(self, job: QueuedJob, model: str) -> None:
        self._free[model] -= job.need_milli

    def reserve(self, job: QueuedJob, model: str) -> None:
        from_free = min(max(self._free[model], 0), job.need_milli)
        self._free[model] -= from_free
        self._incoming[model] -= job.need_milli - from_free

    def release(self, model: str, milli: int) -> None:
        self._incoming[model] = self.incoming(model) + milli

    def whole_free(self, model: str, gpus: int) -> Sequence[tuple[str, int]]:
        return ()  # counts only: fragmentation does not exist here

    def hold_nodes(self, model: str, nodes: Sequence[str], incoming_milli: int = 0) -> None:
        raise AssertionError("a count ledger has no nodes to hold")

    def unhold_nodes(self, model: str, nodes: Sequence[str]) -> None:
        raise AssertionError("a count ledger has no nodes to hold")

    def keep_spot(self, job: QueuedJob) -> bool:
        return False

    def end_cycle(self) -> None:
        pass
