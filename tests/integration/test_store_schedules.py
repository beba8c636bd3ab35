"""Schedules in the store, on SQLite and PostgreSQL: a firing starts its job exactly once, atomically.
And the migrations create exactly the tables the code maps (no drift between the two)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from corral.core.errors import ConflictError
from corral.store.records import JobSpec
from corral.store.sql import SqlStore
from corral.store.tables import Base

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def make(store: SqlStore, name: str = "nightly", **kw: object) -> int:
    tenant = store.create_tenant(f"t-{name}", T0)
    args: dict[str, object] = dict(
        user_id=None,
        name=name,
        expr="@every 60s",
        timezone="UTC",
        concurrency="forbid",
        paused=False,
        job={"command": ["true"]},
        next_run_at=T0,
        now=T0 - timedelta(minutes=1),
    )
    args.update(kw)
    return store.create_schedule(tenant.id, **args).id  # type: ignore[arg-type]


def spec(schedule_id: int) -> JobSpec:
    return JobSpec(command=("true",), name="nightly", schedule_id=schedule_id)


def test_a_firing_starts_its_job_and_moves_the_timetable_together(store: SqlStore) -> None:
    sid = make(store)
    assert [s.id for s in store.due_schedules(T0)] == [sid]
    applied, job = store.fire_schedule(sid, T0, spec(sid), T0 + timedelta(minutes=1), T0, missed=2)
    assert applied and job is not None and job.spec.schedule_id == sid
    s = store.get_schedule(sid)
    assert s is not None
    assert (s.runs, s.skipped, s.missed, s.last_job_id, s.next_run_at) == (1, 0, 2, job.id, T0 + timedelta(minutes=1))
    assert store.due_schedules(T0 + timedelta(seconds=59)) == []
    assert [j.id for j in store.list_jobs(schedule_id=sid)] == [job.id]
    assert store.list_events(job.id)[0].message == f"by schedule {sid}"


def test_the_same_firing_applies_once(store: SqlStore) -> None:
    sid = make(store)
    first = store.fire_schedule(sid, T0, spec(sid), T0 + timedelta(minutes=1), T0)
    second = store.fire_schedule(sid, T0, spec(sid), T0 + timedelta(minutes=1), T0)  # a retry, or a second server
    assert first[0] and second == (False, None)
    assert len(store.list_jobs(schedule_id=sid)) == 1


def test_concurrent_firings_of_one_due_time_start_one_job(store: SqlStore) -> None:
    sid = make(store)
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def fire() -> None:
        barrier.wait()
        results.append(store.fire_schedule(sid, T0, spec(sid), T0 + timedelta(minutes=1), T0)[0])

    threads = [threading.Thread(target=fire) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert len(store.list_jobs(schedule_id=sid)) == 1


def test_skip_records_why_and_starts_nothing(store: SqlStore) -> None:
    sid = make(store)
    applied, job = store.fire_schedule(sid, T0, None, T0 + timedelta(minutes=1), T0, skip_reason="skipped: busy")
    s = store.get_schedule(sid)
    assert applied and job is None and s is not None
    assert (s.runs, s.skipped, s.last_error) == (0, 1, "skipped: busy")
    assert store.list_jobs(schedule_id=sid) == []


def test_paused_or_edited_schedules_do_not_fire(store: SqlStore) -> None:
    sid = make(store)
    store.update_schedule(sid, paused=True)
    assert store.due_schedules(T0 + timedelta(hours=1)) == []
    assert store.fire_schedule(sid, T0, spec(sid), T0 + timedelta(minutes=1), T0) == (False, None)
    store.update_schedule(sid, paused=False, next_run_at=T0 + timedelta(hours=2))
    # a firing planned from the old due time loses against the edit
    assert store.fire_schedule(sid, T0, spec(sid), T0 + timedelta(minutes=1), T0) == (False, None)
    assert store.next_schedule_due() == T0 + timedelta(hours=2)


def test_run_now_leaves_the_timetable_alone(store: SqlStore) -> None:
    sid = make(store)
    applied, job = store.fire_schedule(sid, None, spec(sid), None, T0 - timedelta(seconds=30))
    s = store.get_schedule(sid)
    assert applied and job is not None and s is not None
    assert s.next_run_at == T0 and s.runs == 1


def test_names_are_unique_per_tenant_and_deleting_keeps_the_jobs(store: SqlStore) -> None:
    sid = make(store)
    tenant_id = store.get_schedule(sid).tenant_id  # type: ignore[union-attr]
    with pytest.raises(ConflictError) as e:
        store.create_schedule(tenant_id, None, "nightly", "@daily", "UTC", "forbid", False, {"command": ["x"]}, T0, T0)
    assert e.value.field == "name"
    _, job = store.fire_schedule(sid, T0, spec(sid), T0 + timedelta(minutes=1), T0)
    assert store.delete_schedule(sid) and store.get_schedule(sid) is None
    assert job is not None and store.get_job(job.id) is not None


def test_migrations_create_exactly_the_mapped_tables(store: SqlStore) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": False}), Base.metadata)
    # Index differences are reported too; only real drift (a missing table, column or index) fails.
    assert diff == [], diff
