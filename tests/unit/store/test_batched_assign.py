"""assign_jobs_parts writes a pass's admissions with one UPDATE run for all of them. A job whose state changes
between the assign's read and its write (a cancel through another replica, on PostgreSQL) is not moved, and the
others of the batch are; what the call answers and the events it writes say exactly which moved (SQLite and
PostgreSQL: the change is made on the assign's own connection, just before its UPDATE, where another writer's
would land)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event

from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.store.records import JobSpec
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _node(store: SqlStore, name: str, n: int) -> None:
    gpus = [GpuInfo(index=i, uuid=f"{name}-{i}", model="H100-80GB", memory_mib=81920) for i in range(n)]
    store.upsert_node(name, name, "simulated", 0, 0, {}, gpus, T0)


@pytest.fixture
def cancel_before_update(store: SqlStore) -> Iterator[list[int]]:
    """Jobs appended to the list are cancelled on the assign's connection right before its UPDATE of jobs."""
    victims: list[int] = []

    def before(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if victims and statement.lstrip().upper().startswith("UPDATE JOBS SET STATE"):
            for job_id in victims:
                mark = "?" if store.is_sqlite else "%s"
                cursor.execute(f"UPDATE jobs SET state = 'CANCELLED' WHERE id = {mark}", (job_id,))
            victims.clear()

    event.listen(store.engine, "before_cursor_execute", before)
    try:
        yield victims
    finally:
        event.remove(store.engine, "before_cursor_execute", before)


def test_a_job_changed_between_read_and_write_is_not_moved_and_the_rest_are(
    store: SqlStore, cancel_before_update: list[int]
) -> None:
    _node(store, "n1", 4)
    a, b, c = (store.create_job(JobSpec(command=("x",), gpus=1), T0).id for _ in range(3))
    cancel_before_update.append(b)
    got = store.assign_jobs_parts([(a, [("n1", [0])]), (b, [("n1", [1])]), (c, [("n1", [2])])], T0)
    assert got == [True, False, True]
    states = {j.id: j.state for j in store.get_jobs([a, b, c])}
    assert states == {a: JobState.RUNNING, b: JobState.CANCELLED, c: JobState.RUNNING}
    assert [e.kind for e in store.list_events(b)] == ["submitted"]  # no 'assigned' for the one not moved
    assert [e.kind for e in store.list_events(a)] == ["submitted", "assigned"]
    placed = store.get_job(c)
    assert placed is not None and placed.gpu_indices == (2,) and placed.attempt == 1 and placed.node == "n1"
    assert placed.started_at == T0
    # the GPU b would have had is free: the next pass can give it
    d = store.create_job(JobSpec(command=("x",), gpus=1), T0).id
    assert store.assign_jobs_parts([(d, [("n1", [1])])], T0) == [True]


def test_one_batch_places_many_jobs_with_their_own_parts_and_events(store: SqlStore) -> None:
    _node(store, "n1", 8)
    _node(store, "n2", 8)
    ids = [store.create_job(JobSpec(command=("x",), gpus=2, nodes=2), T0).id for _ in range(4)]
    batch = [(i, [("n1", [2 * k, 2 * k + 1]), ("n2", [2 * k, 2 * k + 1])]) for k, i in enumerate(ids)]
    assert store.assign_jobs_parts(batch, T0) == [True] * 4
    for k, i in enumerate(ids):
        j = store.get_job(i)
        assert j is not None and j.state is JobState.RUNNING and j.attempt == 1
        assert j.parts == (("n1", (2 * k, 2 * k + 1)), ("n2", (2 * k, 2 * k + 1)))
        assert (
            store.list_events(i)[-1].message == f"node n1, GPUs {2 * k},{2 * k + 1}; node n2, GPUs {2 * k},{2 * k + 1}"
        )
    assert sorted(j.id for j in store.list_node_jobs("n2")) == ids
