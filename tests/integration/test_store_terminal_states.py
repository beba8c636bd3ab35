"""Terminal jobs stay terminal in the store (SQLite and PostgreSQL): no assign, finish, requeue, cancel or
preempt moves a SUCCEEDED, FAILED or CANCELLED job, and each refusal leaves the row and its events as they were."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from corral.core.states import JobState
from corral.store.records import Job, JobSpec
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=5)


def _ended(store: SqlStore, ready_nodes: Callable[..., None], state: JobState) -> Job:
    """A job that reached `state` the usual way: CANCELLED while pending, the others by its agent's report."""
    # The assigns below are refused for the job's state, not for unknown nodes or GPUs.
    ready_nodes("n1", "n2", "n3", gpus=2)
    job = store.create_job(JobSpec(command=("true",), gpus=1), T0)
    if state is JobState.CANCELLED:
        store.request_cancel(job.id, T0)
    else:
        assert store.assign_job(job.id, "n1", [0], T0)
        assert store.finish_job(job.id, state, 0 if state is JobState.SUCCEEDED else 1, "", T0)
    got = store.get_job(job.id)
    assert got is not None and got.state is state
    return got


ATTEMPTS: dict[str, Callable[[SqlStore, int], object]] = {
    "assign": lambda s, i: s.assign_job(i, "n2", [1], LATER),
    "assign-gang": lambda s, i: s.assign_job_parts(i, [("n2", [1]), ("n3", [0])], LATER),
    "finish-succeeded": lambda s, i: s.finish_job(i, JobState.SUCCEEDED, 0, "late", LATER),
    "finish-failed": lambda s, i: s.finish_job(i, JobState.FAILED, 9, "late", LATER),
    "finish-cancelled": lambda s, i: s.finish_job(i, JobState.CANCELLED, None, "late", LATER),
    "requeue": lambda s, i: s.requeue_job(i, "late", LATER, failure=True),
    "preempt": lambda s, i: s.request_preempt(i, "late", LATER),
}


@pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED], ids=str)
def test_a_terminal_job_never_moves(store: SqlStore, ready_nodes: Callable[..., None], state: JobState) -> None:
    before = _ended(store, ready_nodes, state)
    events = store.list_events(before.id)
    for attempt, move in ATTEMPTS.items():  # each refused, and the job exactly as it was after each
        assert move(store, before.id) is False, attempt
        assert store.get_job(before.id) == before, attempt
        assert store.list_events(before.id) == events, attempt
        assert store.list_node_jobs("n2") == [], attempt  # a FAILED job assigned again would hold n2's GPU


@pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED], ids=str)
def test_cancelling_a_terminal_job_returns_it_unchanged(
    store: SqlStore, ready_nodes: Callable[..., None], state: JobState
) -> None:
    before = _ended(store, ready_nodes, state)
    events = store.list_events(before.id)
    assert store.request_cancel(before.id, LATER) == before
    assert store.get_job(before.id) == before and store.list_events(before.id) == events


def test_a_pending_job_cannot_succeed_without_running(store: SqlStore) -> None:
    job = store.create_job(JobSpec(command=("true",)), T0)
    assert store.finish_job(job.id, JobState.SUCCEEDED, 0, "", T0) is False
    got = store.get_job(job.id)
    assert got is not None and got.state is JobState.PENDING


@pytest.mark.parametrize("state", [JobState.FAILED, JobState.CANCELLED], ids=str)
def test_a_pending_job_may_fail_or_be_cancelled(store: SqlStore, state: JobState) -> None:
    job = store.create_job(JobSpec(command=("true",)), T0)
    assert store.finish_job(job.id, state, None, "never placed", T0)
    got = store.get_job(job.id)
    assert got is not None and got.state is state and got.reason == "never placed"


def test_a_pending_job_cannot_be_requeued(store: SqlStore) -> None:
    job = store.create_job(JobSpec(command=("true",)), T0)
    assert store.requeue_job(job.id, "x", T0, failure=True) is False
    got = store.get_job(job.id)
    assert got is not None and got.failures == 0 and got.reason == ""


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.RUNNING], ids=str)
def test_finish_refuses_a_state_that_is_not_terminal(
    store: SqlStore, ready_nodes: Callable[..., None], state: JobState
) -> None:
    ready_nodes("n1")
    job = store.create_job(JobSpec(command=("true",)), T0)
    assert store.assign_job(job.id, "n1", [], T0)
    with pytest.raises(ValueError, match="terminal"):
        store.finish_job(job.id, state, None, "", T0)
    got = store.get_job(job.id)
    assert got is not None and got.state is JobState.RUNNING
