"""New jobs on an SQLite without RETURNING (before 3.35: the system SQLite of RHEL 9 and Debian 11, which Python
links there). SQLAlchemy turns INSERT ... RETURNING off for such a library; the store then inserts job by job and
reads the rows back, and a submission must give the same jobs as on a newer library."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from corral.core.models import JobSpec
from corral.core.states import JobState
from corral.store.sql import open_store

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _batch(tenant_id: int) -> list[JobSpec]:
    plain = JobSpec(command=("p",), tenant_id=tenant_id, gpus=1, name="plain")
    first = [JobSpec(command=("a",), tenant_id=tenant_id, array_id=1, array_index=i, array_limit=1) for i in range(3)]
    second = [JobSpec(command=("b",), tenant_id=tenant_id, array_id=2, array_index=i) for i in (4, 9)]
    return [plain, *first, plain, *second]


def _made(path: Path, returning: bool, monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    store = open_store(f"sqlite:///{path}")
    try:
        if not returning:
            monkeypatch.setattr(store.engine.dialect, "insert_returning", False)
        tenant = store.create_tenant("t", T0)
        made = store.create_jobs(_batch(tenant.id), T0, max_active=100)
        one = store.create_job(JobSpec(command=("one",), tenant_id=tenant.id), T0)
        ids = [j.id for j in made]
        assert ids == sorted(ids) and one.id > ids[-1]
        assert all(j.state is JobState.PENDING for j in [*made, one])
        assert [e.kind for e in store.list_events(made[3].id)] == ["submitted"]
        stored = store.get_jobs([*ids, one.id])
        assert [(j.id, j.spec.array_id) for j in stored] == [(j.id, j.spec.array_id) for j in [*made, one]]
        first = ids[0]  # as ids from 1: the same shape on both paths
        return [
            (j.id - first, j.spec.name, j.spec.command, j.spec.array_index, j.spec.array_limit,
             None if j.spec.array_id is None else j.spec.array_id - first, j.spec.gpus)
            for j in stored
        ]  # fmt: skip
    finally:
        store.close()


def test_a_batch_without_returning_is_what_it_is_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_returning = _made(tmp_path / "a.db", True, monkeypatch)
    without = _made(tmp_path / "b.db", False, monkeypatch)
    assert without == with_returning
    assert [r[5] for r in without] == [None, 1, 1, 1, None, 5, 5, None]  # each array keyed by its first task
