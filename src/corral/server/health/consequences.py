"""What a GPU or node failure leads to: its jobs requeued (or ended) by the retry rules, and the scheduler and the
node's agent woken once capacity changed.

The retry policy: a job stopped by a failure it did not cause (its GPU failed, its node was lost or revoked) goes
back to the queue after a backoff, up to `max_retries` times, then FAILS with the reason; a job being cancelled
ends CANCELLED. Callers pass the jobs they loaded (load -> decide here -> apply through the store).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from corral.core.states import JobState
from corral.store.protocols import JobStore
from corral.store.records import Job

MAX_BACKOFF_S = 300.0


class CapacityWaker(Protocol):
    """Told when a node's usable capacity changed (a GPU failed or came back, its jobs were requeued).
    Must not block and may be called from any thread."""

    def capacity_changed(self, node: str) -> None: ...


class Wakeable(Protocol):
    def fire(self) -> None: ...


class NodeWakeable(Protocol):
    def notify(self, node: str) -> None: ...


@dataclass(frozen=True, slots=True)
class SchedulerAndAgentWaker:
    """The server's CapacityWaker: a scheduling pass soon (the freed or lost GPUs change what fits) and the node's
    agent out of its long poll (it learns at once which of its jobs to stop)."""

    scheduler: Wakeable  # the scheduler's Trigger
    agents: NodeWakeable  # the NodeNotifier agents long-poll on

    def capacity_changed(self, node: str) -> None:
        self.scheduler.fire()
        self.agents.notify(node)


def compute_backoff_s(retries_used: int, base_s: float) -> float:
    """base, 2 x base, 4 x base, ... capped at MAX_BACKOFF_S."""
    factor: int = 2 ** max(retries_used, 0)  # typeshed types int ** int as Any (a negative exponent is a float)
    return min(base_s * factor, MAX_BACKOFF_S)


def requeue_after_failure(store: JobStore, job: Job, reason: str, now: datetime, backoff_base_s: float) -> JobState:
    """Requeue `job` (RUNNING) after a failure of its GPU or node, or end it. Returns its new state."""
    if job.cancel_requested:
        store.finish_job(job.id, JobState.CANCELLED, None, f"{reason} while cancelling", now)
        return JobState.CANCELLED
    retries_used = job.failures
    if retries_used >= job.spec.max_retries:
        store.finish_job(job.id, JobState.FAILED, None, f"{reason}; no retries left ({job.spec.max_retries} used)", now)
        return JobState.FAILED
    not_before = now + timedelta(seconds=compute_backoff_s(retries_used, backoff_base_s))
    store.requeue_job(job.id, reason, now, not_before=not_before, failure=True)
    return JobState.PENDING


def apply_gpu_failure(
    store: JobStore, node: str, gpu_index: int, cause: str, jobs: Iterable[Job], now: datetime, backoff_base_s: float
) -> dict[int, JobState]:
    """GPU `gpu_index` of `node` failed (`cause`: "xid: fatal Xid 79"): every job of `jobs` running on it is
    requeued or ended, with a `gpu_failed` event. Returns job id -> its new state."""
    reason = f"GPU {gpu_index} on {node} failed ({cause})"
    outcome: dict[int, JobState] = {}
    for job in jobs:
        if gpu_index in job.gpus_on(node):
            # The failure first, then what it led to (requeued, failed, cancelled): events list in that order.
            store.add_event(job.id, "gpu_failed", reason, now)
            outcome[job.id] = requeue_after_failure(store, job, reason, now, backoff_base_s)
    return outcome


def apply_node_failure(
    store: JobStore, reason: str, jobs: Iterable[Job], now: datetime, backoff_base_s: float
) -> dict[int, JobState]:
    """A whole node is gone (`reason`: "node n1 lost", "node n1 revoked"): every job of `jobs` (those placed on
    it) is requeued or ended. Returns job id -> its new state."""
    return {job.id: requeue_after_failure(store, job, reason, now, backoff_base_s) for job in jobs}
