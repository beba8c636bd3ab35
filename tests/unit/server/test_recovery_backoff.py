"""Job retry after a GPU or node failure: the backoff grows (base, 2 x, 4 x ...) up to its cap, and the retries
end in FAILED with the reason once max_retries are used."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from corral.core.states import JobState
from corral.server.health.consequences import MAX_BACKOFF_S, compute_backoff_s, requeue_after_failure
from corral.store.records import JobSpec
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("retries_used", "base_s", "backoff_s"),
    [
        (0, 10, 10),
        (1, 10, 20),
        (2, 10, 40),
        (3, 10, 80),
        (4, 10, 160),
        (5, 10, MAX_BACKOFF_S),
        (40, 10, MAX_BACKOFF_S),
        (0, 0, 0),
        (3, 0, 0),
        (2, 2.5, 10),
        (-1, 10, 10),
    ],
)
def test_backoff_doubles_per_retry_up_to_the_cap(retries_used: int, base_s: float, backoff_s: float) -> None:
    assert compute_backoff_s(retries_used, base_s) == pytest.approx(backoff_s)


def test_the_cap_is_five_minutes() -> None:
    assert MAX_BACKOFF_S == 300.0


def test_each_requeue_waits_longer_then_the_job_fails(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("n1")
    job = store.create_job(JobSpec(command=("train",), gpus=1, max_retries=3), T0)
    waits: list[float] = []
    now = T0
    for attempt in range(3):
        assert store.assign_job(job.id, "n1", [0], now)
        running = store.get_job(job.id)
        assert running is not None
        assert (
            requeue_after_failure(store, running, "GPU 0 failed (xid 79)", now, backoff_base_s=10) is JobState.PENDING
        )
        after = store.get_job(job.id)
        assert after is not None and after.not_before is not None and after.failures == attempt + 1
        waits.append((after.not_before - now).total_seconds())
        now = after.not_before + timedelta(seconds=1)
    assert waits == [10, 20, 40]
    assert store.assign_job(job.id, "n1", [0], now)
    last = store.get_job(job.id)
    assert last is not None
    assert requeue_after_failure(store, last, "node n1 lost", now, backoff_base_s=10) is JobState.FAILED
    final = store.get_job(job.id)
    assert final is not None and final.state is JobState.FAILED and "no retries left (3 used)" in final.reason


def test_a_job_being_cancelled_is_not_retried(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("n1")
    job = store.create_job(JobSpec(command=("train",), gpus=1), T0)
    assert store.assign_job(job.id, "n1", [0], T0)
    store.request_cancel(job.id, T0)
    running = store.get_job(job.id)
    assert running is not None and running.cancel_requested
    assert requeue_after_failure(store, running, "node n1 lost", T0, backoff_base_s=10) is JobState.CANCELLED
    final = store.get_job(job.id)
    assert final is not None and final.state is JobState.CANCELLED and final.failures == 0
