"""The store's job-state moves (SQLite and PostgreSQL) change their one job, all of what they must, and log why:
written from the mutants `make mutate` left alive in finish_job and assign_job_parts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from corral.core.states import JobState
from corral.store.records import JobSpec
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _running(store: SqlStore, node: str = "n1", gpus: tuple[int, ...] = (0,)) -> int:
    job = store.create_job(JobSpec(command=("train",), gpus=len(gpus)), T0)
    assert store.assign_job(job.id, node, list(gpus), T0)
    return job.id


def test_finish_ends_only_its_job(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("n1")
    mine, other = _running(store, "n1", (0,)), _running(store, "n1", (1,))
    pending = store.create_job(JobSpec(command=("x",)), T0).id
    assert store.finish_job(mine, JobState.FAILED, 3, "", T0)
    states = {j.id: j.state for j in store.list_jobs()}
    assert states == {mine: JobState.FAILED, other: JobState.RUNNING, pending: JobState.PENDING}


def test_finish_logs_the_exit_code_or_the_reason(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("n1", "n2")
    exited, stopped = _running(store), _running(store, "n2")
    later = T0 + timedelta(seconds=9)
    assert store.finish_job(exited, JobState.FAILED, 3, "ignored when there is an exit code", later)
    assert store.finish_job(stopped, JobState.CANCELLED, None, "stopped by an admin", later)
    assert [(e.kind, e.message, e.at) for e in store.list_events(exited)][-1] == ("failed", "exit code 3", later)
    assert [(e.kind, e.message) for e in store.list_events(stopped)][-1] == ("cancelled", "stopped by an admin")
    got = store.get_job(exited)
    assert got is not None and (got.exit_code, got.finished_at) == (3, later)


def test_assign_records_every_part_and_when_it_started(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("n1", "n2")
    job = store.create_job(JobSpec(command=("train",), gpus=2, nodes=2), T0)
    start = T0 + timedelta(seconds=30)
    assert store.assign_job_parts(job.id, [("n1", [0, 1]), ("n2", [2, 3])], start)
    got = store.get_job(job.id)
    assert got is not None
    assert got.parts == (("n1", (0, 1)), ("n2", (2, 3)))
    assert (got.node, got.gpu_indices, got.started_at, got.attempt) == ("n1", (0, 1), start, 1)
    assert [j.id for j in store.list_node_jobs("n2")] == [job.id]
    assert [(e.kind, e.message) for e in store.list_events(job.id)][-1] == (
        "assigned",
        "node n1, GPUs 0,1; node n2, GPUs 2,3",
    )


def test_a_new_attempt_starts_clean(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    """What the last attempt left (a part's exit, delivery) is gone when the job is assigned again."""
    ready_nodes("n1", "n2", "n3", "n4")
    job = store.create_job(JobSpec(command=("train",), gpus=1, nodes=2), T0)
    assert store.assign_job_parts(job.id, [("n1", [0]), ("n2", [0])], T0)
    store.mark_delivered([job.id], "n1")
    assert store.record_part_exit(job.id, "n1", 0) == {"n1": 0}
    again = T0 + timedelta(minutes=1)
    assert store.requeue_job(job.id, "node n2 lost", T0, not_before=again, failure=True)
    assert store.assign_job_parts(job.id, [("n3", [1]), ("n4", [1])], again)
    got = store.get_job(job.id)
    assert got is not None
    assert (got.part_exits, got.delivered, got.delivered_to, got.attempt, got.started_at) == (
        {},
        False,
        frozenset(),
        2,
        again,
    )
    assert (got.reason, got.not_before) == ("", None)  # the backoff and the requeue's reason belong to the last attempt
    assert got.parts == (("n3", (1,)), ("n4", (1,)))


def test_a_job_without_gpus_is_logged_as_such(store: SqlStore, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("n1")
    job = store.create_job(JobSpec(command=("etl",)), T0)
    assert store.assign_job(job.id, "n1", [], T0)
    assert [(e.kind, e.message) for e in store.list_events(job.id)][-1] == ("assigned", "node n1, GPUs none")
