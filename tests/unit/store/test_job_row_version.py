"""The job row version (migration 0028): the database bumps it on every update of a job's row, whoever writes it
(SQLite and PostgreSQL). The JobCache built on it is tested with the store contract
(tests/contract/test_scheduling_store_contract.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text, update

from corral.core.states import JobState
from corral.store.records import JobSpec
from corral.store.sql import SqlStore
from corral.store.tables import JobRow

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


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
