"""The job-level retry policy: a job stopped by a failure it did not cause (its GPU failed, its node was
lost) goes back to the queue after a backoff, up to `max_retries` times, then FAILS with the reason."""

from __future__ import annotations

from datetime import datetime, timedelta

from corral.core.states import JobState
from corral.store.records import Job
from corral.store.base import StateStore

MAX_BACKOFF_S = 300.0


def compute_backoff_s(retries_used: int, base_s: float) -> float:
    """base, 2 x base, 4 x base, ... capped at MAX_BACKOFF_S."""
    factor: int = 2 ** max(retries_used, 0)  # typeshed types int ** int as Any (a negative exponent is a float)
    return min(base_s * factor, MAX_BACKOFF_S)


def requeue_after_failure(store: StateStore, job: Job, reason: str, now: datetime, backoff_base_s: float) -> JobState:
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
