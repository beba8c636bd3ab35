"""The job row version (migration 0028) and the scheduler's JobCache built on it, on SQLite, PostgreSQL and the
memory store: after any change a job can go through, reading through the cache gives exactly what list_jobs gives,
and a job no change touched is not loaded again."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text, update

from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.store.memory import MemoryStore
from corral.store.protocols import SchedulingStore
from corral.store.records import JobSpec
from corral.store.snapshot import JobCache
from corral.store.sql import SqlStore, open_store
from corral.store.tables import JobRow

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "memory"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SchedulingStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    url = (
        f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else str(request.getfixturevalue("postgres_url"))
    )
    s = open_store(url)
    try:
        yield s
    finally:
        s.close()


def test_the_database_bumps_the_version_on_every_update_whoever_writes_it(store: SqlStore) -> None:
    job = store.create_job(JobSpec(command=("x",)), T0)

    def versions() -> dict[int, int]:
        return {j.id: v for j, v in store.list_jobs_changed([JobState.PENDING], {})[1]}

    assert versions() == {job.id: 0}
    store.add_event(job.id, "note", "", T0)  # another table: no change
    assert versions() == {job.id: 0}
    with store._tx() as s:  # a statement as older code writes it (no row_version in it)
        s.execute(update(JobRow).where(JobRow.id == job.id).values(reason="waits"))
    assert versions() == {job.id: 1}
    with store._tx() as s:  # through the ORM
        row = s.get(JobRow, job.id)
        assert row is not None
        row.priority = 5
    assert versions() == {job.id: 2}
    with store._tx() as s:  # an update that changes nothing still counts: readers load it again, nothing lost
        s.execute(text("UPDATE jobs SET reason = reason WHERE id = :i"), {"i": job.id})
    assert versions() == {job.id: 3}
    store.request_cancel(job.id, T0)
    assert store.list_jobs_changed([JobState.PENDING], {}) == ([], [])


def _node(store: SchedulingStore, name: str) -> None:
    gpus = [GpuInfo(index=i, uuid=f"{name}-{i}", model="H100-80GB", memory_mib=81920) for i in range(2)]
    store.upsert_node(name, name, "simulated", 64_000, 512_000, {}, gpus, T0)


MOVES: dict[str, Callable[[SchedulingStore, int, random.Random], Any]] = {
    "submit": lambda s, _, r: s.create_job(JobSpec(command=("x",), gpus=1, priority=r.randint(0, 9)), T0),
    "assign": lambda s, i, r: s.assign_job_parts(i, [(r.choice(["n1", "n2"]), [r.randint(0, 1)])], T0),
    "finish": lambda s, i, _: s.finish_job(i, JobState.SUCCEEDED, 0, "", T0),
    "requeue": lambda s, i, r: s.requeue_job(i, "node lost", T0 + timedelta(seconds=r.randint(1, 99))),
    "preempt": lambda s, i, _: s.request_preempt(i, "for another", T0, 1),
    "cancel": lambda s, i, _: s.request_cancel(i, T0),
    "deliver": lambda s, i, _: s.mark_delivered([i], "n1"),
    "phase": lambda s, i, _: s.set_job_phase(i, 1, "pulling 5%"),
    # (the memory store keeps no staging: the simulators stage nothing)
    "stage": lambda s, i, _: (
        isinstance(s, SqlStore) and s.update_staging(i, ("", None), "staging", "n1", "staging input", ["n1"])
    ),
    "nothing": lambda s, i, _: s.get_job(i),
}


@pytest.mark.parametrize("seed", range(3))
def test_reading_through_the_cache_always_gives_what_list_jobs_gives(any_store: SchedulingStore, seed: int) -> None:
    rnd = random.Random(seed)
    _node(any_store, "n1")
    _node(any_store, "n2")
    caches = {st: JobCache(any_store, [st]) for st in (JobState.PENDING, JobState.RUNNING)}
    both = JobCache(any_store, [JobState.PENDING, JobState.RUNNING])
    ids = [any_store.create_job(JobSpec(command=("x",), gpus=1), T0).id for _ in range(6)]
    for _ in range(60):
        move = rnd.choice(sorted(MOVES))
        got = MOVES[move](any_store, rnd.choice(ids), rnd)
        if move == "submit":
            ids.append(got.id)
        for st, cache in caches.items():
            assert cache.read() == any_store.list_jobs(states=[st]), move
        assert both.read() == any_store.list_jobs(states=[JobState.PENDING, JobState.RUNNING]), move


def test_a_job_no_change_touched_is_not_loaded_again(any_store: SchedulingStore) -> None:
    a, b = (any_store.create_job(JobSpec(command=("x",)), T0).id for _ in range(2))
    cache = JobCache(any_store, [JobState.PENDING])
    cache.read()
    known = {a: _version(any_store, a), b: _version(any_store, b)}
    assert any_store.list_jobs_changed([JobState.PENDING], known) == ([a, b], [])
    any_store.request_cancel(b, T0)
    c = any_store.create_job(JobSpec(command=("y",)), T0).id
    ids, changed = any_store.list_jobs_changed([JobState.PENDING], known)
    assert ids == [a, c] and [j.id for j, _ in changed] == [c]
    assert [j.id for j in cache.read()] == [a, c]


def _version(store: SchedulingStore, job_id: int) -> int:
    _, loaded = store.list_jobs_changed([JobState.PENDING], {})
    return next(v for j, v in loaded if j.id == job_id)
